"""Pascal VOC acquisition: the data channel, then S3, then HTTP(S) mirrors, once per host.

:func:`acquire_voc` returns a directory holding ``VOCdevkit/VOC2007`` and ``VOCdevkit/VOC2012``.

* Sources, tried per tar in this order, each only when the one before failed: the data channel
  (``voc``/``train``/``training``: the tars, or an already extracted VOCdevkit, returned as is),
  ``data_s3_uri`` (boto3 with its standard configuration: credentials, region, retries,
  ``AWS_ENDPOINT_URL_S3``), then ``data_mirrors`` ("official" = the Oxford locations).
* Every tar is checked against its SHA-1 (``data_checksums``) while it streams; a mismatch
  discards what was extracted from it and moves on to the next source.
* Local rank 0 of each host fetches and extracts; the other ranks on the host poll for the
  completion marker (no collectives). A directory completed earlier with the same tars and
  checksums is reused without a request.
* Bytes move with parallel ranged requests (S3 ranged GetObject, HTTP Range when the server has
  it; a dropped or stalled request resumes from the byte it reached) and are extracted while they
  arrive: each range is received straight into a reused chunk buffer (one copy, socket to
  buffer), the chunks are taken in order, hashed by one thread and extracted by another
  (:mod:`frcnn_train.safe_tar`: its own header reader, member bodies written from the buffers
  with no further copy) into a temporary directory whose content is moved into place only after
  the SHA-1 matched. Tars go one after the other by default (``tar_parallelism``): on few cores,
  extracting several at once costs more than it gains.

Pure functions (tar specs, URLs, source order, marker checks, failure text) come first and are
tested with plain values; the network and the filesystem stay in the classes below them.
"""

import collections
import concurrent.futures
import hashlib
import http.client
import io
import json
import logging
import os
import queue as queue_module
import random
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Optional

from .errors import DataError, JobError, shorten
from .safe_tar import ExtractStats, UnsafeMemberError, extract_stream, read_exact, write_all

LOG = logging.getLogger("frcnn_train")

# The three Pascal VOC tars and their SHA-1s (REFERENCE.md section 4).
VOC_TARS = (
    ("VOCtrainval_06-Nov-2007.tar", "34ed68851bce2a36e2a223fa52c661d592c66b3c"),
    ("VOCtest_06-Nov-2007.tar", "41a8d6e12baa5ab18ee7f8f8029b9e11805b4ef1"),
    ("VOCtrainval_11-May-2012.tar", "4e443f8a2eca6b1dac8a6c57641b67dd40621a49"),
)
# What each VOC tar leaves in the tree: (year, split files under ImageSets/Main).
VOC_TAR_CONTENT = {
    "VOCtrainval_06-Nov-2007.tar": (2007, ("trainval",)),
    "VOCtest_06-Nov-2007.tar": (2007, ("test",)),
    "VOCtrainval_11-May-2012.tar": (2012, ("trainval",)),
}
OFFICIAL = "official"
OFFICIAL_BASE = "http://host.robots.ox.ac.uk/pascal/VOC"
OFFICIAL_DIRS = {"VOCtrainval_06-Nov-2007.tar": "voc2007", "VOCtest_06-Nov-2007.tar": "voc2007",
                 "VOCtrainval_11-May-2012.tar": "voc2012"}

DATA_DIR_NAME = "voc"  # <work_dir>/voc/VOCdevkit/VOC20xx
MARKER_NAME = ".frcnn-data.json"
DONE_DIR_NAME = ".frcnn-tars"
PARTIAL_PREFIX = ".partial-"
MARKER_FORMAT = 1
FAILURE_BUDGET = 900  # characters of the whole failure text (it becomes /opt/ml/output/failure)
USER_AGENT = "frcnn-train-voc-fetch/1"
MIB = 1 << 20
_READ = 1 << 20  # bytes per socket read
_EOF = object()


@dataclass(frozen=True)
class FetchOptions:
    """Transfer settings. The defaults suit a training job; tests shrink sizes and delays."""

    chunk_size: int = 8 * MIB  # bytes per ranged request
    s3_workers: int = 8  # parallel ranged requests per tar (S3)
    http_workers: int = 4  # parallel ranged requests per tar (HTTP mirrors)
    tar_parallelism: int = 1  # tars fetched and extracted side by side
    queue_chunks: int = 4  # in-order chunks buffered between the hasher and the extractor
    max_buffer_bytes: int = 256 * MIB  # cap on the chunks requested or held ahead, per tar
    extract_subprocess: bool = False  # extract in a child process fed by a pipe (safe_tar.child_main)
    filter_every_member: bool = False  # tarfile's data filter on plain members too (safe_tar._Checks)
    attempts: int = 5  # tries per request before a source is given up
    backoff_s: float = 1.0  # first retry delay; doubles per failure, with jitter
    max_backoff_s: float = 30.0
    timeout_s: float = 60.0  # HTTP connect/read timeout (boto3 keeps its own)
    wait_timeout_s: float = 4 * 3600.0  # how long other ranks wait for local rank 0
    poll_s: float = 1.0
    progress_s: float = 30.0  # seconds between progress log lines
    disk_margin_bytes: int = 64 * MIB

    @classmethod
    def from_environ(cls, environ=None):
        """Defaults, with FRCNN_FETCH_{WORKERS,CHUNK_MB,TIMEOUT_S,WAIT_S,PROGRESS_S} and
        FRCNN_FETCH_FILTER_EVERY_MEMBER=1 applied."""
        environ = os.environ if environ is None else environ
        values = {}
        if environ.get("FRCNN_FETCH_FILTER_EVERY_MEMBER", "").strip().lower() in ("1", "true", "yes"):
            values["filter_every_member"] = True
        try:
            if environ.get("FRCNN_FETCH_WORKERS"):
                workers = int(environ["FRCNN_FETCH_WORKERS"])
                values.update(s3_workers=workers, http_workers=workers)
            if environ.get("FRCNN_FETCH_CHUNK_MB"):
                values["chunk_size"] = int(float(environ["FRCNN_FETCH_CHUNK_MB"]) * MIB)
            for var, name in (("FRCNN_FETCH_TIMEOUT_S", "timeout_s"), ("FRCNN_FETCH_WAIT_S", "wait_timeout_s"),
                              ("FRCNN_FETCH_PROGRESS_S", "progress_s")):
                if environ.get(var):
                    values[name] = float(environ[var])
        except ValueError as exc:
            raise DataError("invalid FRCNN_FETCH_* setting: %s" % exc, "set it to a number.") from None
        return cls(**values)


# --------------------------------------------------------------------------------------------
# Pure functions
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TarSpec:
    name: str
    sha1: Optional[str]  # None: not verified (data_checksums=none)


def tar_specs(checksums):
    """The tars to fetch, from the parsed ``data_checksums``: '' (the VOC tars and SHA-1s),
    'none' (the VOC tars, unverified) or a JSON object {tar name: sha1} (exactly those tars)."""
    if checksums in ("", None):
        return tuple(TarSpec(name, sha1) for name, sha1 in VOC_TARS)
    if checksums == "none":
        return tuple(TarSpec(name, None) for name, _ in VOC_TARS)
    table = json.loads(checksums) if isinstance(checksums, str) else dict(checksums)
    specs = []
    for name, sha1 in table.items():
        if not name or name != os.path.basename(name) or name in (".", ".."):
            raise DataError("data_checksums names %r, which is not a plain file name." % name,
                            "name each tar by its file name, e.g. {\"mydata.tar\": \"<sha1>\"}.")
        specs.append(TarSpec(name, sha1.lower()))
    return tuple(specs)


def expected_content(specs):
    """{year: set of split names} the extracted tree must hold, from the VOC tars among ``specs``."""
    expected = {}
    for spec in specs:
        if spec.name in VOC_TAR_CONTENT:
            year, splits = VOC_TAR_CONTENT[spec.name]
            expected.setdefault(year, set()).update(splits)
    return expected


def parse_s3_uri(uri):
    """'s3://bucket/some/prefix/' -> ('bucket', 'some/prefix/')."""
    if not uri.startswith("s3://") or len(uri) <= 5:
        raise ValueError("not an s3:// URI: %r" % uri)
    bucket, _, prefix = uri[5:].partition("/")
    if not bucket:
        raise ValueError("no bucket in %r" % uri)
    return bucket, prefix


def s3_key(prefix, name):
    return (prefix.rstrip("/") + "/" + name) if prefix.strip("/") else name


def mirror_url(base, name):
    """Where a mirror holds a tar: the official Oxford layout for 'official', else <base>/<name>."""
    if base == OFFICIAL:
        return "%s/%s/%s" % (OFFICIAL_BASE, OFFICIAL_DIRS.get(name, "voc2012"), name)
    return base.rstrip("/") + "/" + name


@dataclass(frozen=True)
class SourceSpec:
    kind: str  # "channel", "s3" or "http"
    location: str  # directory, s3:// URI or base URL ("official" for the Oxford host)
    label: str  # how messages name it


def plan_sources(data_s3_uri, data_mirrors, channel_name=None, channel_path=None):
    """The sources in the order they are tried: channel, S3, then each mirror."""
    sources = []
    if channel_path:
        sources.append(SourceSpec("channel", channel_path, "channel '%s'" % channel_name))
    if data_s3_uri:
        uri = data_s3_uri if data_s3_uri.endswith("/") else data_s3_uri + "/"
        sources.append(SourceSpec("s3", uri, uri))
    for base in data_mirrors:
        base = base.strip()
        if not base:
            continue
        if base == OFFICIAL:
            sources.append(SourceSpec("http", OFFICIAL, "official mirror (host.robots.ox.ac.uk)"))
        elif base.startswith(("http://", "https://")):
            sources.append(SourceSpec("http", base.rstrip("/"), base.rstrip("/")))
        else:
            raise DataError("data_mirrors has %r, which is not an http(s):// URL or 'official'." % base,
                            "list mirror base URLs, e.g. data_mirrors=https://mirror.example/voc,official.")
    return sources


def data_key(specs, sources):
    """What a completed data directory was built from: the tar names and checksums (and, for
    unverified tars, the sources, since only they then say what the bytes are)."""
    payload = {"format": MARKER_FORMAT, "tars": [[s.name, s.sha1] for s in specs]}
    if any(s.sha1 is None for s in specs):
        payload["sources"] = [[s.kind, s.location] for s in sources]
    return hashlib.sha1(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:20]


def marker_state(marker, key, launch):
    """'ok' (complete, same key), 'failed' (this launch's fetcher failed), else 'pending'."""
    if not isinstance(marker, dict) or marker.get("format") != MARKER_FORMAT or marker.get("key") != key:
        return "pending"
    if marker.get("status") == "ok":
        return "ok"
    if marker.get("status") == "failed" and marker.get("launch") == launch:
        return "failed"
    return "pending"


def short_tar(name):
    """'VOCtrainval_06-Nov-2007.tar' -> '2007 trainval' for messages; other names unchanged."""
    if name in VOC_TAR_CONTENT:
        year, splits = VOC_TAR_CONTENT[name]
        return "%d %s" % (year, splits[0])
    return name


def failure_text(failed_tars, attempts, fix, budget=FAILURE_BUDGET):
    """The cause of a DataError when no source delivered ``failed_tars``.

    ``attempts`` is [(source label, tar name, reason)] in the order tried; the text names every
    source and what happened, grouped per source, shortened so that 'DataError: <cause> Fix: <fix>'
    stays within ``budget`` characters.
    """
    groups = collections.OrderedDict()
    for label, tar, reason in attempts:
        groups.setdefault(label, collections.OrderedDict()).setdefault(reason, []).append(tar)
    names = ", ".join(failed_tars)
    head = "could not get %s: every source failed. Tried: " % names
    room = budget - len("DataError: ") - len(" Fix: ") - len(fix)

    def render(limit):
        parts = []
        for label, reasons in groups.items():
            shown = []
            for reason, tars in reasons.items():
                text = reason if len(reason) <= limit else reason[: max(limit - 3, 1)] + "..."
                if len(failed_tars) > 1 or len(tars) > 1:
                    which = "all" if set(tars) >= set(failed_tars) else ", ".join(short_tar(t) for t in tars)
                    text += " [%s]" % which
                shown.append(text)
            parts.append("%s: %s" % (label, "; ".join(shown)))
        return head + " | ".join(parts) + "."

    for limit in (200, 120, 80, 50, 30, 16):
        text = render(limit)
        if len(text) <= room:
            return text
    return shorten(render(16), max(room, 80))


def find_year_dirs(base, max_depth=2):
    """{'VOC2007': path, ...} found at base, base/VOCdevkit, base/*, base/*/VOCdevkit."""
    found = {}
    candidates = [base, os.path.join(base, "VOCdevkit")]
    if os.path.isdir(base) and max_depth >= 2:
        for entry in sorted(os.listdir(base)):
            path = os.path.join(base, entry)
            if os.path.isdir(path) and not os.path.islink(path):
                candidates += [path, os.path.join(path, "VOCdevkit")]
    for cand in candidates:
        if not os.path.isdir(cand) or os.path.islink(cand):
            continue
        for entry in sorted(os.listdir(cand)):
            path = os.path.join(cand, entry)
            if re.fullmatch(r"VOC\d{4}", entry) and os.path.isdir(path) and not os.path.islink(path):
                found.setdefault(entry, path)
    return found


def _count_files(path):
    try:
        with os.scandir(path) as entries:
            return sum(1 for e in entries if e.is_file())
    except OSError:
        return 0


def check_voc_tree(root, expected):
    """Summarise ``root/VOCdevkit`` and list what is wrong with it.

    Returns (summary, problems): summary is {'VOC2007': {'Annotations': n, 'JPEGImages': m,
    'splits': [...]}} and problems a list of sentences (empty when the tree is usable).
    ``expected`` is {year: splits} (see :func:`expected_content`).
    """
    devkit = os.path.join(root, "VOCdevkit")
    years = []
    if os.path.isdir(devkit):
        years = sorted(d for d in os.listdir(devkit)
                       if re.fullmatch(r"VOC\d{4}", d) and os.path.isdir(os.path.join(devkit, d)))
    summary, problems = {}, []
    if not years:
        problems.append("%s holds no VOC<year> directory" % devkit)
    for year in sorted(expected):
        if "VOC%d" % year not in years:
            problems.append("VOC%d is missing" % year)
    for name in years:
        base = os.path.join(devkit, name)
        main = os.path.join(base, "ImageSets", "Main")
        splits = sorted(f[:-4] for f in os.listdir(main) if f.endswith(".txt")) if os.path.isdir(main) else []
        info = {"Annotations": _count_files(os.path.join(base, "Annotations")),
                "JPEGImages": _count_files(os.path.join(base, "JPEGImages")), "splits": splits}
        summary[name] = info
        for sub in ("Annotations", "JPEGImages"):
            if not info[sub]:
                problems.append("%s/%s is missing or empty" % (name, sub))
        if not splits:
            problems.append("%s/ImageSets/Main has no split files" % name)
        for split in sorted(expected.get(int(name[3:]), ())):
            if split not in splits:
                problems.append("%s/ImageSets/Main/%s.txt is missing" % (name, split))
    return summary, problems


def human_bytes(n):
    for unit, size in (("GB", 1 << 30), ("MB", MIB), ("KB", 1 << 10)):
        if n >= size:
            return "%.1f %s" % (n / float(size), unit)
    return "%d B" % n


def launch_token(environ=None):
    """Identifies this launch of the job's ranks on this host, so that a waiting rank does not take
    an earlier launch's failure for its own: $FRCNN_LAUNCH_ID when the launcher sets it, else the
    parent process (mpirun/orted start a host's ranks) and its start time."""
    environ = os.environ if environ is None else environ
    if environ.get("FRCNN_LAUNCH_ID"):
        return "env:" + environ["FRCNN_LAUNCH_ID"]
    ppid = os.getppid()
    started = ""
    try:
        with open("/proc/%d/stat" % ppid) as handle:
            started = handle.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        pass
    return "ppid:%d:%s" % (ppid, started)


# --------------------------------------------------------------------------------------------
# Transfers: remotes that deliver a tar's bytes in order, with retries and resumption
# --------------------------------------------------------------------------------------------

class SourceFailed(Exception):
    """This source cannot deliver this tar; the reason is short and goes into messages."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


class _Cancelled(Exception):
    pass


class _Retryable(Exception):
    pass


class _Cancel:
    """A stop flag that also stops its children (a tar's attempt under the whole fetch)."""

    def __init__(self, parent=None):
        self._event = threading.Event()
        self._children = []
        self._lock = threading.Lock()
        if parent is not None:
            parent._adopt(self)

    def _adopt(self, child):
        with self._lock:
            self._children.append(child)
            stopped = self._event.is_set()
        if stopped:
            child.set()

    def set(self):
        self._event.set()
        with self._lock:
            children = list(self._children)
        for child in children:
            child.set()

    def is_set(self):
        return self._event.is_set()

    def wait(self, seconds):
        return self._event.wait(seconds)


def _backoff(opts, failures):
    delay = min(opts.max_backoff_s, opts.backoff_s * (2 ** (failures - 1)))
    return delay * (0.5 + random.random() / 2)


class _BufferPool:
    """Chunk buffers handed back by the consumer and reused: a steady transfer allocates (and
    page-faults) no new memory per chunk. Buffers are ``size`` bytes; chunks are views of them."""

    def __init__(self, size):
        self.size = size
        self._free = []
        self._lock = threading.Lock()

    def take(self, want):
        if want > self.size:
            return memoryview(bytearray(want))
        with self._lock:
            buf = self._free.pop() if self._free else None
        return memoryview(buf if buf is not None else bytearray(self.size))[:want]

    def give(self, chunk):
        """Return a chunk's buffer; the caller holds no view of it any more."""
        buf = getattr(chunk, "obj", None)
        if isinstance(buf, bytearray) and len(buf) == self.size:
            with self._lock:
                self._free.append(buf)


def _direct_readinto(response):
    """A ``readinto1`` for the body of the HTTP response under ``response`` (urllib's, or the one
    under a boto3 StreamingBody and urllib3), which receives into our buffer with no intermediate
    copy; None when the body is transformed on the way (a content encoding), chunked, of unknown
    length, or the layers are not the ones known here."""
    if isinstance(response, http.client.HTTPResponse):
        raw = response
    else:
        urllib3_response = getattr(response, "_raw_stream", None)
        raw = getattr(urllib3_response, "_fp", None)
        if not isinstance(raw, http.client.HTTPResponse) or getattr(urllib3_response, "_decoded_buffer", None):
            return None
    if raw.headers.get("Content-Encoding", "identity").strip().lower() not in ("", "identity"):
        return None
    if raw.chunked or raw.length is None or not hasattr(getattr(raw, "fp", None), "readinto1"):
        return None
    # One receive per call (what arrived before a timeout is counted), straight from the socket's
    # buffered reader: the caller reads exactly the announced length and then closes the response.
    return raw.fp.readinto1


def _after_failure(exc, classify, failures, opts, stop, what, action):
    """After a failed try (``failures`` before it, in a row): SourceFailed once ``opts.attempts``
    are used up, else log why and what comes next, wait the backoff and return the new count.
    ``classify(exc)`` gives the reason for a retryable error and raises for any other."""
    reason = classify(exc)
    failures += 1
    if failures >= opts.attempts:
        raise SourceFailed("%s (gave up after %d attempts)" % (reason, failures)) from None
    delay = _backoff(opts, failures)
    LOG.warning("data: %s: %s; %s in %.1f s (attempt %d of %d)", what, reason, action, delay, failures + 1,
                opts.attempts)
    if stop.wait(delay):
        raise _Cancelled() from None
    return failures


def _fetch_range(open_fn, classify, start, end, opts, stop, count, what, piece=_READ, pool=None):
    """Bytes [start, end] as one buffer (a view of one from ``pool``, when given); a dropped or
    stalled transfer resumes where it stopped.

    ``open_fn(offset, end)`` returns a readable response positioned at ``offset``; ``classify(exc)``
    returns a short reason for a retryable error and raises SourceFailed for a permanent one.
    Failures without progress are counted; ``opts.attempts`` of them in a row give the source up.
    Responses are received straight into the buffer where the HTTP layers allow it (see
    :func:`_direct_readinto`), else read with ``read1`` (or ``read``), ``piece`` bytes at a time:
    what arrived before a timeout is kept, up to the last piece.
    """
    want = end - start + 1
    buf = pool.take(want) if pool is not None else memoryview(bytearray(want))
    got = 0
    failures = 0
    while got < want:
        if stop.is_set():
            raise _Cancelled()
        before = got
        offset = start + before
        response = None
        try:
            response = open_fn(offset, end)
            readinto = _direct_readinto(response)
            read = None if readinto else (getattr(response, "read1", None) or response.read)
            while got < want:
                if readinto is not None:
                    n = readinto(buf[got:min(want, got + piece)])
                else:
                    data = read(min(piece, want - got))
                    n = len(data)
                    buf[got:got + n] = data
                if not n:
                    break
                got += n
                count(n)
                if stop.is_set():
                    raise _Cancelled()
            if got < want:
                raise _Retryable("connection closed after %d of %d bytes" % (got - before, end - offset + 1))
        except (_Cancelled, SourceFailed):
            raise
        except Exception as exc:  # classified below; programming errors re-raise there
            failures = _after_failure(exc, classify, 0 if got > before else failures, opts, stop, what,
                                      "resuming bytes %d-%d" % (start + got, end))
        finally:
            if response is not None:
                _close_quietly(response)
    return buf


def _sequential(open_fn, classify, size, opts, stop, count, what, piece_size=_READ):
    """The whole object in order, for sources without ranges: after a drop, reopen and skip."""
    delivered, failures = 0, 0
    while True:
        if stop.is_set():
            raise _Cancelled()
        response = None
        before = delivered
        try:
            response = open_fn(delivered)
            read = getattr(response, "read1", None) or response.read
            while True:
                piece = read(piece_size)
                if not piece:
                    break
                delivered += len(piece)
                count(len(piece))
                yield piece
                if stop.is_set():
                    raise _Cancelled()
            if size is not None and delivered < size:
                raise _Retryable("connection closed after %d of %d bytes" % (delivered, size))
            return
        except (_Cancelled, SourceFailed):
            raise
        except Exception as exc:
            failures = _after_failure(exc, classify, 0 if delivered > before else failures, opts, stop, what,
                                      "resuming at byte %d" % delivered)
        finally:
            if response is not None:
                _close_quietly(response)


def _ordered_chunks(size, chunk, fetch, workers, stop, max_buffer=None):
    """Fetch [0, size) as ranged chunks on ``workers`` threads and yield them in order.

    ``fetch(start, end, halt)`` returns the bytes; ``halt`` is set when the generator ends (done,
    failed or abandoned) or ``stop`` is. At most workers + 2 chunks (and at most ``max_buffer``
    bytes, but never fewer than 2 chunks) are requested or held ahead of the consumer.
    """
    ranges = [(s, min(s + chunk, size) - 1) for s in range(0, size, chunk)]
    window = workers + 2
    if max_buffer:
        window = max(2, min(window, max_buffer // max(chunk, 1)))
    workers = min(workers, window)
    halt = _Cancel(stop)
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="voc-fetch")
    pending = collections.deque()
    submitted = 0
    try:
        while submitted < len(ranges) and len(pending) < window:
            pending.append(pool.submit(fetch, *ranges[submitted], halt))
            submitted += 1
        while pending:
            data = pending.popleft().result()
            if submitted < len(ranges):
                pending.append(pool.submit(fetch, *ranges[submitted], halt))
                submitted += 1
            yield data
    finally:
        halt.set()
        for future in pending:
            future.cancel()
        pool.shutdown(wait=True)


def _with_retries(call, classify, what, opts, stop):
    """``call()`` until it succeeds, with backoff; SourceFailed after ``opts.attempts`` failures."""
    failures = 0
    while True:
        try:
            return call()
        except Exception as exc:
            failures = _after_failure(exc, classify, failures, opts, stop, what, "retrying")


def _close_quietly(response):
    try:
        response.close()
    except Exception:  # closing a broken connection may raise; nothing to do about it
        pass


class _FileRemote:
    """A tar in a (read-only) channel directory."""

    ranged = False

    def __init__(self, path, label):
        self.path = path
        self.label = label
        self.size = None

    def open(self, opts, stop, count):
        if not os.path.isfile(self.path):
            raise SourceFailed("not in the channel")
        self.size = os.path.getsize(self.path)
        self._opts, self._count = opts, count

    def chunks(self, stop, pool=None):
        def open_at(offset):
            handle = open(self.path, "rb")
            handle.seek(offset)
            return handle

        def classify(exc):
            raise SourceFailed("read error: %s" % exc)

        return _sequential(open_at, classify, self.size, self._opts, stop, self._count, self.label,
                           piece_size=4 * MIB)


def _parse_content_range(value):
    """'bytes 0-99/1234' -> (0, 99, 1234); total None for '*'; None when unparsable."""
    match = re.fullmatch(r"\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*", value or "")
    if not match:
        return None
    total = None if match.group(3) == "*" else int(match.group(3))
    return int(match.group(1)), int(match.group(2)), total


def _classify_http(exc):
    if isinstance(exc, urllib.error.HTTPError):
        if exc.code in (408, 425, 429) or exc.code >= 500:
            return "HTTP %d" % exc.code
        raise SourceFailed("HTTP %d %s" % (exc.code, exc.reason or "")) from None
    if isinstance(exc, urllib.error.URLError):
        reason = exc.reason
        if isinstance(reason, (socket.timeout, TimeoutError)):
            return "timed out"
        if isinstance(reason, OSError) and reason.strerror:
            return reason.strerror.lower()
        return str(reason)
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timed out"
    if isinstance(exc, _Retryable):
        return str(exc)
    if isinstance(exc, http.client.IncompleteRead):
        return "connection closed early (incomplete read)"
    if isinstance(exc, (http.client.HTTPException, OSError)):
        return "%s%s" % (type(exc).__name__, (": %s" % exc) if str(exc) else "")
    raise exc


class _SkipReader:
    """A 200 answer to a ranged request (the server ignored Range): skip to the offset."""

    def __init__(self, response, skip):
        self._response = response
        self._skip = skip

    def read(self, n):
        while self._skip:
            data = self._response.read(min(self._skip, _READ))
            if not data:
                return b""
            self._skip -= len(data)
        return self._response.read(n)

    def read1(self, n):
        if self._skip:
            return self.read(n)
        return self._response.read1(n)

    def close(self):
        self._response.close()


class _HttpRemote:
    """A tar behind an HTTP(S) URL. The first request asks for the first chunk: a 206 answer gives
    the size and the range support, and its body is used; a 200 answer means one sequential stream."""

    def __init__(self, url, label):
        self.url = url
        self.label = label
        self.size = None
        self.ranged = False
        self._first = None  # (open response, last byte it covers or None for a whole-object answer)
        self._lock = threading.Lock()

    def _take_first(self, offset, end):
        """The response of the first request, when it serves exactly [offset, end]; else close it."""
        with self._lock:
            first = self._first
            if first is None or offset != 0:
                return None
            self._first = None
        if first[1] == end:
            return first[0]
        _close_quietly(first[0])
        return None

    def _request(self, offset, end=None):
        headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
        if offset or end is not None:
            headers["Range"] = "bytes=%d-%s" % (offset, "" if end is None else end)
        return urllib.request.urlopen(urllib.request.Request(self.url, headers=headers),
                                      timeout=self._opts.timeout_s)

    def open(self, opts, stop, count):
        self._opts, self._count = opts, count
        response = _with_retries(lambda: self._request(0, opts.chunk_size - 1), _classify_http,
                                 self.url, opts, stop)
        if response.status == 206:
            parsed = _parse_content_range(response.headers.get("Content-Range"))
            if parsed and parsed[0] == 0 and parsed[2] is not None:
                self.size, self.ranged = parsed[2], True
                self._first = (response, parsed[1])
                return
            response.close()
            response = self._request(0)  # unusable range answer: read it as one stream
        length = response.headers.get("Content-Length")
        self.size = int(length) if length and length.isdigit() else None
        self._first = (response, None)

    def _open_range(self, offset, end):
        first = self._take_first(offset, end)
        if first is not None:
            return first
        response = self._request(offset, end)
        if response.status == 206:
            parsed = _parse_content_range(response.headers.get("Content-Range"))
            if not parsed or parsed[0] != offset:
                response.close()
                raise SourceFailed("bad Content-Range %r for bytes %d-%d"
                                   % (response.headers.get("Content-Range"), offset, end))
            return response
        return _SkipReader(response, offset)

    def _open_stream(self, offset):
        first = self._take_first(offset, None)
        if first is not None:
            return first
        response = self._request(offset)
        return response if response.status == 206 else _SkipReader(response, offset)

    def chunks(self, stop, pool=None):
        opts = self._opts
        if self.ranged:
            def fetch(start, end, halt):
                return _fetch_range(self._open_range, _classify_http, start, end, opts, halt, self._count,
                                    self.url, pool=pool)

            return _ordered_chunks(self.size, opts.chunk_size, fetch, opts.http_workers, stop, opts.max_buffer_bytes)
        return _sequential(self._open_stream, _classify_http, self.size, opts, stop, self._count, self.url)


_S3_PERMANENT = {"NoSuchKey", "NoSuchBucket", "AccessDenied", "AllAccessDisabled", "InvalidAccessKeyId",
                 "SignatureDoesNotMatch", "InvalidBucketName", "PreconditionFailed", "InvalidObjectState",
                 "404", "403", "400", "412", "301", "PermanentRedirect", "ExpiredToken",
                 "InvalidToken", "AuthorizationHeaderMalformed"}


def _classify_s3(exc):
    from botocore import exceptions as bex

    if isinstance(exc, bex.ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", "?"))
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        text = {"404": "not found (404)", "NoSuchKey": "not found (NoSuchKey)", "403": "access denied (403)",
                "412": "object changed during the transfer (412)",
                "PreconditionFailed": "object changed during the transfer (412)"}.get(code, code)
        if code in _S3_PERMANENT or (status is not None and 400 <= status < 500 and status not in (408, 429)):
            raise SourceFailed(text) from None
        return text
    if isinstance(exc, (bex.NoCredentialsError, bex.PartialCredentialsError, bex.NoRegionError)):
        raise SourceFailed(str(exc)) from None
    if isinstance(exc, (bex.BotoCoreError, _Retryable, OSError)):
        return "%s: %s" % (type(exc).__name__, exc)
    try:
        from urllib3.exceptions import HTTPError as Urllib3Error
    except ImportError:  # pragma: no cover
        Urllib3Error = ()
    if Urllib3Error and isinstance(exc, Urllib3Error):
        return "%s: %s" % (type(exc).__name__, exc)
    raise exc


class _S3Remote:
    """A tar in S3: HeadObject for the size and ETag, then ranged GetObject (If-Match the ETag)."""

    ranged = True

    def __init__(self, client_factory, bucket, key, label):
        self._client_factory = client_factory
        self.bucket, self.key, self.label = bucket, key, label
        self.size = None
        self._etag = None

    def open(self, opts, stop, count):
        self._opts, self._count = opts, count
        try:
            self._client = self._client_factory()
        except SourceFailed:
            raise
        except Exception as exc:
            raise SourceFailed("cannot create an S3 client: %s" % exc) from None
        head = _with_retries(lambda: self._client.head_object(Bucket=self.bucket, Key=self.key),
                             _classify_s3, "s3://%s/%s" % (self.bucket, self.key), opts, stop)
        self.size = int(head["ContentLength"])
        self._etag = head.get("ETag")

    def _open_range(self, offset, end):
        kwargs = dict(Bucket=self.bucket, Key=self.key, Range="bytes=%d-%d" % (offset, end))
        if self._etag:
            kwargs["IfMatch"] = self._etag
        return self._client.get_object(**kwargs)["Body"]

    def chunks(self, stop, pool=None):
        opts = self._opts
        if self.size == 0:
            return iter(())

        def fetch(start, end, halt):  # a read that times out loses at most its own 1 MiB
            return _fetch_range(self._open_range, _classify_s3, start, end, opts, halt, self._count,
                                "s3://%s/%s" % (self.bucket, self.key), pool=pool)

        return _ordered_chunks(self.size, opts.chunk_size, fetch, opts.s3_workers, stop, opts.max_buffer_bytes)


def _s3_client_factory(max_connections):
    """One boto3 client for the whole fetch (clients are thread-safe), made on first use."""
    lock = threading.Lock()
    made = []

    def factory():
        with lock:
            if not made:
                try:
                    import boto3
                    from botocore.config import Config
                except ImportError:
                    raise SourceFailed("boto3 is not installed") from None
                session = boto3.session.Session()
                made.append(session.client("s3", config=Config(max_pool_connections=max_connections)))
            return made[0]

    return factory


# --------------------------------------------------------------------------------------------
# The pipeline: in-order chunks -> SHA-1 -> streaming, checked extraction
# --------------------------------------------------------------------------------------------

class _QueueReader:
    """A read(n) file object over a queue of in-order chunks (the tar stream for tarfile)."""

    def __init__(self, q, stop, release=None):
        self._q = q
        self._stop = stop
        self._release = release  # called with each chunk once it has been consumed
        self._item = None
        self._view = memoryview(b"")
        self._pos = 0
        self._eof = False

    def _done_with_item(self):
        item, self._item = self._item, None
        self._view, self._pos = memoryview(b""), 0
        if item is not None and self._release is not None:
            self._release(item)

    def _fill(self):
        """Make the current view non-empty; False at the end of the stream."""
        while self._pos >= len(self._view):
            self._done_with_item()
            if self._eof:
                return False
            try:
                item = self._q.get(timeout=0.2)
            except queue_module.Empty:
                if self._stop.is_set():
                    raise _Cancelled() from None
                continue
            if item is _EOF:
                self._eof = True
                return False
            if isinstance(item, BaseException):
                self._eof = True
                raise item
            self._item, self._view, self._pos = item, memoryview(item), 0
        return True

    def read(self, n=-1):
        if not self._fill():
            return b""
        end = len(self._view) if n is None or n < 0 else min(len(self._view), self._pos + n)
        out = self._view[self._pos:end].tobytes()
        self._pos = end
        return out

    def read_exact(self, n):
        """``n`` bytes (fewer only at the end of the stream): a tar header for safe_tar."""
        return read_exact(self.read, n)

    def copy_to(self, out_fd, n):
        """Write the next ``n`` bytes to ``out_fd`` (None: skip them) straight from the chunks."""
        while n:
            if not self._fill():
                raise tarfile.ReadError("unexpected end of data")
            end = min(len(self._view), self._pos + n)
            if out_fd is not None:
                write_all(out_fd, self._view[self._pos:end])
            n -= end - self._pos
            self._pos = end

    def next_chunk(self):
        """The rest of the current chunk, or the next one; None at the end. The chunk before it
        is released: the caller must be done with it."""
        if not self._fill():
            return None
        out = self._view[self._pos:]
        self._pos = len(self._view)
        return out

    def drain(self):
        while self.read(4 * MIB):
            pass


@dataclass
class _Delivery:
    sha1: str
    size: int
    files: int
    extracted_bytes: int


_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _ChildExtractor:
    """``python -m frcnn_train.safe_tar DEST`` fed through a pipe: the extraction (syscall-heavy
    Python) does not compete for this process's interpreter lock with the transfer threads."""

    def __init__(self, dest, filter_every_member=False):
        env = dict(os.environ)
        env["PYTHONPATH"] = _PACKAGE_PARENT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        argv = [sys.executable, "-m", "frcnn_train.safe_tar"]
        argv += ["--filter-every-member"] if filter_every_member else []
        self._stderr = tempfile.TemporaryFile()  # a file, not a pipe: the child can never block on it
        self._proc = subprocess.Popen(argv + [dest], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._stderr, env=env, bufsize=0)
        self._fd = self._proc.stdin.fileno()
        self.gone = False
        try:
            import fcntl

            fcntl.fcntl(self._fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
        except (ImportError, OSError):
            pass

    def feed(self, data):
        """Write ``data``; False once the child has stopped reading (it says why in finish())."""
        try:
            write_all(self._fd, data)
        except (BrokenPipeError, ConnectionResetError):
            self.gone = True
        return not self.gone

    def finish(self):
        out, _ = self._proc.communicate()  # closes stdin: the child sees the end of the stream
        self._stderr.seek(0)
        err = self._stderr.read()
        self._stderr.close()
        lines = out.decode("utf-8", "replace").strip().splitlines()
        try:
            result = json.loads(lines[-1]) if lines else {}
        except ValueError:
            result = {}
        if result.get("ok"):
            return ExtractStats(members=result["members"], files=result["files"], bytes=result["bytes"])
        if "unsafe" in result:
            raise UnsafeMemberError(result["unsafe"], result.get("reason", "is unsafe"))
        if "tar_error" in result:
            raise tarfile.ReadError(result["tar_error"])
        if "os_error" in result:
            raise OSError(result["os_error"])
        tail = err.decode("utf-8", "replace").strip().splitlines()[-3:]
        raise RuntimeError("the extraction process exited with %s: %s" % (self._proc.returncode, " / ".join(tail)))

    def abort(self):
        if self._proc.poll() is None:
            self._proc.kill()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        for pipe in (self._proc.stdin, self._proc.stdout, self._stderr):
            try:
                pipe.close()
            except (OSError, ValueError):
                pass


def _pipeline(remote, partial, opts, stop):
    """Stream ``remote`` through SHA-1 into a checked extraction under ``partial``.

    A producer thread pulls the in-order chunks (fetched by the remote's worker threads into
    buffers of one pool), hashes them and queues them; this thread extracts from the queue
    (safe_tar writes each member body straight from the chunk buffers) and hands each consumed
    chunk's buffer back to the pool. With ``opts.extract_subprocess`` the extraction runs in a
    child process instead, fed through a pipe (bodies move from the pipe to the files by splice).
    """
    q = queue_module.Queue(maxsize=opts.queue_chunks)
    pool = _BufferPool(opts.chunk_size)
    digest = hashlib.sha1()
    total = [0]

    def put(item):
        while not stop.is_set():
            try:
                q.put(item, timeout=0.2)
                return True
            except queue_module.Full:
                continue
        return False

    def produce():
        chunks = None
        try:
            chunks = remote.chunks(stop, pool)
            for chunk in chunks:
                digest.update(chunk)  # releases the GIL: hashing runs beside the extraction
                total[0] += len(chunk)
                if not put(chunk):
                    return
            put(_EOF)
        except BaseException as exc:  # delivered to the consumer, which raises it in its thread
            put(exc)
        finally:
            if chunks is not None and hasattr(chunks, "close"):
                chunks.close()

    child = _ChildExtractor(partial, opts.filter_every_member) if opts.extract_subprocess else None
    producer = threading.Thread(target=produce, name="voc-hash", daemon=True)
    producer.start()
    reader = _QueueReader(q, stop, release=pool.give)
    try:
        if child is None:
            stats = extract_stream(reader, partial, opts.filter_every_member)
            reader.drain()  # the bytes after the end-of-archive marker count for the SHA-1 too
        else:
            while True:
                item = reader.next_chunk()
                if item is None or not child.feed(item):
                    break
            stats = child.finish()  # raises what stopped the child (an unsafe member, a bad tar)
    except BaseException:
        stop.set()
        if child is not None:
            child.abort()
        raise
    finally:
        producer.join()
    return _Delivery(digest.hexdigest(), total[0], stats.files, stats.bytes)


# --------------------------------------------------------------------------------------------
# Progress, disk space, markers
# --------------------------------------------------------------------------------------------

class _Progress:
    """Periodic log lines (bytes, MB/s, ETA); a redrawn bar when stdout is a terminal."""

    def __init__(self, interval_s, tars=0, stream=None):
        self._interval = max(0.5, float(interval_s))
        self._expected = tars
        self._finished = set()
        self._stream = stream or sys.stdout
        try:
            self._tty = self._stream.isatty()
        except (AttributeError, ValueError):
            self._tty = False
        self._lock = threading.Lock()
        self._tars = collections.OrderedDict()  # name -> [bytes, size or None, label]
        self._stop = threading.Event()
        self._thread = None
        self._t0 = time.monotonic()
        self._last = (self._t0, 0)

    def begin(self, name, size, label):
        with self._lock:
            self._tars[name] = [0, size, label]

    def counter(self, name):
        def count(n):
            with self._lock:
                self._tars[name][0] += n
        return count

    def forget(self, name):
        with self._lock:
            self._tars.pop(name, None)

    def finished(self, name):
        with self._lock:
            self._finished.add(name)

    def snapshot(self):
        with self._lock:
            done = sum(t[0] for t in self._tars.values())
            total = sum(t[1] or t[0] for t in self._tars.values())
            active = [(n, t[2]) for n, t in self._tars.items() if n not in self._finished]
        return done, total, active

    def line(self):
        now = time.monotonic()
        done, total, active = self.snapshot()
        then, before = self._last
        rate = (done - before) / max(now - then, 1e-6)
        self._last = (now, done)
        eta = (total - done) / rate if rate > 0 else float("inf")
        text = "data: %s of %s received (%.0f%%), %.1f MB/s, ETA %s; %d of %d tars done" % (
            human_bytes(done), human_bytes(total), 100.0 * done / total if total else 0.0, rate / MIB,
            ("%.0f s" % eta) if eta != float("inf") else "?", len(self._finished), self._expected)
        if active:
            text += "; now: " + ", ".join("%s from %s" % (n, label) for n, label in active)
        return text, done, total, rate

    def _run(self):
        next_log = time.monotonic() + self._interval
        while not self._stop.wait(0.5 if self._tty else self._interval):
            if time.monotonic() >= next_log:
                next_log = time.monotonic() + self._interval
                LOG.info(self.line()[0])
            if self._tty:
                done, total, _ = self.snapshot()
                width = 30
                filled = int(width * done / total) if total else 0
                self._stream.write("\r[%s%s] %s / %s " % ("#" * filled, "." * (width - filled),
                                                           human_bytes(done), human_bytes(total)))
                self._stream.flush()

    def __enter__(self):
        self._thread = threading.Thread(target=self._run, name="voc-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        if self._tty:
            self._stream.write("\n")
            self._stream.flush()


def _free_bytes(path):
    return shutil.disk_usage(path).free


class _DiskBudget:
    """Free space is checked before each tar's extraction, counting the tars already under way."""

    def __init__(self, path, margin):
        self._path = path
        self._margin = margin
        self._lock = threading.Lock()
        self._reserved = {}

    def reserve(self, name, size):
        need = int((size or 0) * 1.05) + self._margin
        with self._lock:
            free = _free_bytes(self._path)
            others = sum(self._reserved.values())
            if free - others < need:
                raise DataError(
                    "not enough free disk space under %s to extract %s: it needs about %d bytes (%s)%s "
                    "and %d bytes (%s) are free."
                    % (self._path, name, need, human_bytes(need),
                       (" besides %d bytes (%s) for the tars being extracted" % (others, human_bytes(others)))
                       if others else "", free, human_bytes(free)),
                    "give the job a larger volume (VolumeSizeInGB / volume_size) or free space under %s."
                    % self._path)
            self._reserved[name] = need

    def release(self, name):
        with self._lock:
            self._reserved.pop(name, None)


def read_marker(root):
    try:
        with open(os.path.join(root, MARKER_NAME)) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _write_json(path, payload):
    tmp = "%s.tmp-%d-%d" % (path, os.getpid(), threading.get_ident())
    with open(tmp, "w") as handle:
        json.dump(payload, handle, indent=1, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


class _HostLock:
    """An exclusive flock beside the data directory (one fetcher per directory at a time)."""

    def __init__(self, path):
        self._path = path
        self._handle = None

    def __enter__(self):
        import fcntl

        self._handle = open(self._path, "a")
        fcntl.flock(self._handle.fileno(), fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        import fcntl

        fcntl.flock(self._handle.fileno(), fcntl.LOCK_UN)
        self._handle.close()


# --------------------------------------------------------------------------------------------
# Extraction into place
# --------------------------------------------------------------------------------------------

def _drop_symlinks(base):
    """Symlinks are not moved into the data tree: relative ones could point elsewhere there."""
    for dirpath, dirnames, filenames in os.walk(base):
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                LOG.warning("data: not keeping the symlink %s", os.path.relpath(path, base))
                os.unlink(path)


def _merge_tree(src, dst):
    """Move ``src`` into ``dst``: whole directories by one rename when ``dst`` is absent."""
    if not os.path.lexists(dst):
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.rename(src, dst)
        return
    if os.path.isdir(src) and os.path.isdir(dst) and not os.path.islink(dst):
        with os.scandir(src) as entries:
            names = [e.name for e in entries]
        for name in names:
            _merge_tree(os.path.join(src, name), os.path.join(dst, name))
        return
    if os.path.isdir(dst) and not os.path.islink(dst):
        shutil.rmtree(dst)
    os.replace(src, dst)


def _place(partial, root, tar_name, label):
    """Normalise what one tar extracted to root/VOCdevkit/VOC<year> and move it there."""
    years = find_year_dirs(partial)
    if not years:
        top = sorted(os.listdir(partial))[:5]
        raise DataError("%s from %s holds no VOC<year> directory (top level: %s)."
                        % (tar_name, label, ", ".join(top) or "nothing"),
                        "provide tars in the VOC layout (VOCdevkit/VOC2007/...), or check data_checksums.")
    _drop_symlinks(partial)
    for name, path in sorted(years.items()):
        _merge_tree(path, os.path.join(root, "VOCdevkit", name))
    return sorted(years)


def _clean_partials(root):
    if not os.path.isdir(root):
        return
    for entry in os.listdir(root):
        if entry.startswith(PARTIAL_PREFIX):
            shutil.rmtree(os.path.join(root, entry), ignore_errors=True)


# --------------------------------------------------------------------------------------------
# The fetch on local rank 0
# --------------------------------------------------------------------------------------------

@dataclass
class _Context:
    root: str
    key: str
    opts: FetchOptions
    sources: list
    progress: _Progress
    disk: _DiskBudget
    abort: _Cancel
    s3_client: object
    merge_lock: threading.Lock = field(default_factory=threading.Lock)


class _TarFailed(Exception):
    def __init__(self, attempts):
        super().__init__("every source failed")
        self.attempts = attempts


def _remote_for(source, spec, ctx):
    if source.kind == "channel":
        return _FileRemote(os.path.join(source.location, spec.name), source.label)
    if source.kind == "s3":
        bucket, prefix = parse_s3_uri(source.location)
        return _S3Remote(ctx.s3_client, bucket, s3_key(prefix, spec.name), source.label)
    return _HttpRemote(mirror_url(source.location, spec.name), source.label)


def _fetch_tar(spec, ctx):
    """Fetch, verify and place one tar, trying the sources in order. Raises _TarFailed when none
    delivered it, DataError for what no other source can fix (an unsafe member, no disk space)."""
    attempts = []
    for source in ctx.sources:
        if ctx.abort.is_set():
            raise _Cancelled()
        stop = _Cancel(ctx.abort)
        remote = _remote_for(source, spec, ctx)
        count = ctx.progress.counter(spec.name)
        ctx.progress.begin(spec.name, None, source.label)
        partial = None
        started = time.monotonic()
        try:
            remote.open(ctx.opts, stop, count)
            ctx.progress.begin(spec.name, remote.size, source.label)
            ctx.disk.reserve(spec.name, remote.size)
            try:
                partial = tempfile.mkdtemp(prefix=PARTIAL_PREFIX + spec.name + "-", dir=ctx.root)
                delivery = _pipeline(remote, partial, ctx.opts, stop)
                if remote.size is not None and delivery.size != remote.size:
                    raise SourceFailed("truncated: %d of %d bytes" % (delivery.size, remote.size))
                if spec.sha1 and delivery.sha1 != spec.sha1:
                    raise SourceFailed("SHA-1 mismatch (got %s, expected %s)" % (delivery.sha1[:12], spec.sha1[:12]))
                with ctx.merge_lock:
                    years = _place(partial, ctx.root, spec.name, source.label)
                    record = {"name": spec.name, "sha1": delivery.sha1, "expected": spec.sha1,
                              "source": source.label, "bytes": delivery.size, "key": ctx.key,
                              "files": delivery.files, "years": years}
                    _write_json(os.path.join(ctx.root, DONE_DIR_NAME, spec.name + ".json"), record)
            finally:
                ctx.disk.release(spec.name)
                if partial:
                    shutil.rmtree(partial, ignore_errors=True)
            ctx.progress.finished(spec.name)
            seconds = time.monotonic() - started
            LOG.info("data: %s from %s: %s in %.1f s (%.1f MB/s), SHA-1 %s, %d files extracted", spec.name,
                     source.label, human_bytes(delivery.size), seconds, delivery.size / MIB / max(seconds, 1e-6),
                     "verified" if spec.sha1 else "not checked (data_checksums=none)", delivery.files)
            return record
        except SourceFailed as exc:
            reason = exc.reason
        except UnsafeMemberError as exc:
            raise DataError("%s from %s was refused: %s. Nothing of it was kept, and nothing was written "
                            "outside %s." % (spec.name, source.label, exc, ctx.root),
                            "provide a tar whose members all stay inside it (no absolute paths, '..', "
                            "links out of the tree or device files).") from None
        except (tarfile.TarError, EOFError) as exc:
            reason = "not a readable tar (%s)" % (str(exc) or type(exc).__name__)
        except (_Cancelled, JobError):
            raise
        except OSError as exc:  # writing failed (disk full, permissions): no other source helps
            raise DataError("extracting %s from %s under %s failed: %s" % (spec.name, source.label, ctx.root, exc),
                            "check the free space and permissions of %s." % ctx.root) from exc
        ctx.progress.forget(spec.name)
        attempts.append((source.label, spec.name, reason))
        LOG.warning("data: %s: %s failed: %s (nothing extracted from it was kept)%s", spec.name, source.label,
                    reason, "; trying the next source" if source is not ctx.sources[-1] else "")
    raise _TarFailed(attempts)


def _done_records(root):
    folder = os.path.join(root, DONE_DIR_NAME)
    records = {}
    if os.path.isdir(folder):
        for entry in os.listdir(folder):
            if entry.endswith(".json"):
                try:
                    with open(os.path.join(folder, entry)) as handle:
                        records[entry[:-5]] = json.load(handle)
                except (OSError, ValueError):
                    records[entry[:-5]] = None
    return records


def _reset_root(root, specs, key, wipe=False):
    """Keep the tars a previous, interrupted run completed with the same key; else start empty."""
    _clean_partials(root)
    records = _done_records(root)
    names = {s.name for s in specs}
    keep = not wipe and all(isinstance(r, dict) and r.get("key") == key and name in names
                            for name, r in records.items())
    if not keep or (os.path.isdir(root) and os.listdir(root) and not records):
        if os.path.isdir(root) and os.listdir(root):
            LOG.info("data: clearing %s (it holds data from other tars or checksums)", root)
        shutil.rmtree(root, ignore_errors=True)
        records = {}
    os.makedirs(os.path.join(root, DONE_DIR_NAME), exist_ok=True)
    return records


_FIX_SOURCES = ("put the tars (or an extracted VOCdevkit) in the 'voc' channel, or set data_s3_uri to an "
                "S3 prefix holding them, or data_mirrors to a reachable HTTP(S) mirror; if the tars are "
                "not the official VOC ones, set data_checksums.")


def _fetch_all(specs, sources, root, key, expected, opts, launch):
    """Local rank 0: reuse a complete directory, or fetch what is missing; write the marker."""
    marker = read_marker(root)
    wipe = False
    if marker_state(marker, key, launch) == "ok":
        summary, problems = check_voc_tree(root, expected)
        if not problems and summary == marker.get("tree"):
            LOG.info("data: %s is complete (marker from %s); reusing it without fetching", root,
                     time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(marker.get("time", 0))))
            return
        LOG.info("data: %s has a marker but the tree changed (%s); fetching again", root,
                 "; ".join(problems) or "file counts differ")
        wipe = True
    if os.path.exists(os.path.join(root, MARKER_NAME)):
        os.remove(os.path.join(root, MARKER_NAME))
    done = _reset_root(root, specs, key, wipe)
    todo = [s for s in specs if s.name not in done]
    if done:
        LOG.info("data: %s already extracted by an earlier run; fetching %s", ", ".join(sorted(done)),
                 ", ".join(s.name for s in todo) or "nothing more")
    LOG.info("data: fetching %s into %s; sources in order: %s", ", ".join(s.name for s in todo), root,
             ", ".join(s.label for s in sources) or "none")
    workers = max(opts.s3_workers, opts.http_workers) * max(1, opts.tar_parallelism) + 4
    ctx = _Context(root=root, key=key, opts=opts, sources=sources, progress=_Progress(opts.progress_s, len(todo)),
                   disk=_DiskBudget(root, opts.disk_margin_bytes), abort=_Cancel(),
                   s3_client=_s3_client_factory(workers))
    records = dict(done)
    failures, fatal = [], None
    started = time.monotonic()
    with ctx.progress:
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, min(opts.tar_parallelism, len(todo) or 1)),
                                                   thread_name_prefix="voc-tar") as pool:
            futures = {pool.submit(_fetch_tar, spec, ctx): spec for spec in todo}
            for future in concurrent.futures.as_completed(futures):
                spec = futures[future]
                try:
                    records[spec.name] = future.result()
                except _TarFailed as exc:
                    failures.append((spec.name, exc.attempts))
                except _Cancelled:
                    pass
                except BaseException as exc:  # fatal: stop the other tars, report this one
                    if fatal is None:
                        fatal = exc
                    ctx.abort.set()
    if fatal is not None:
        raise fatal
    if failures:
        order = [s.name for s in specs]
        failures.sort(key=lambda f: order.index(f[0]))
        labels = [s.label for s in sources]
        attempts = [a for _, tar_attempts in failures for a in tar_attempts]
        attempts.sort(key=lambda a: labels.index(a[0]) if a[0] in labels else len(labels))
        raise DataError(failure_text([f[0] for f in failures], attempts, _FIX_SOURCES), _FIX_SOURCES)
    summary, problems = check_voc_tree(root, expected)
    if problems:
        raise DataError("the extracted data under %s is incomplete: %s." % (root, "; ".join(problems)),
                        "check that the tars are the VOC ones (or a custom dataset in the VOC layout with "
                        "Annotations, JPEGImages and ImageSets/Main split files).")
    total = sum(r.get("bytes", 0) for n, r in records.items() if n not in done)
    seconds = time.monotonic() - started
    _write_json(os.path.join(root, MARKER_NAME), {
        "format": MARKER_FORMAT, "status": "ok", "key": key, "launch": launch, "time": time.time(),
        "host": socket.gethostname(), "tars": records, "tree": summary})
    LOG.info("data: ready in %s (%s fetched in %.1f s, %.1f MB/s): %s", root, human_bytes(total), seconds,
             total / MIB / max(seconds, 1e-6),
             ", ".join("%s %d images" % (y, s["JPEGImages"]) for y, s in sorted(summary.items())))


def _write_failure_marker(root, key, launch, exc):
    cause = exc.cause if isinstance(exc, JobError) else "%s: %s" % (type(exc).__name__, exc)
    fix = exc.fix if isinstance(exc, JobError) else "see the job log of local rank 0 on this host."
    try:
        os.makedirs(root, exist_ok=True)
        _write_json(os.path.join(root, MARKER_NAME), {
            "format": MARKER_FORMAT, "status": "failed", "key": key, "launch": launch, "time": time.time(),
            "host": socket.gethostname(), "cause": cause, "fix": fix})
    except OSError as err:  # the waiting ranks then time out; say why here
        LOG.error("data: could not write the failure marker under %s: %s", root, err)


def _wait_for_host(root, key, expected, launch, opts):
    """Ranks other than local rank 0: poll the marker until it says done, failed, or time runs out."""
    started = time.monotonic()
    next_log = started + 60.0
    while True:
        marker = read_marker(root)
        state = marker_state(marker, key, launch)
        if state == "ok":
            summary, problems = check_voc_tree(root, expected)
            if not problems and summary == marker.get("tree"):
                LOG.debug("data: local rank 0 prepared %s", root)
                return
        elif state == "failed":
            fix = str(marker.get("fix") or "see the log of local rank 0 on this host.")
            prefix = "local rank 0 on this host failed to prepare the data: "
            room = FAILURE_BUDGET - len("DataError: ") - len(prefix) - len(" Fix: ") - len(fix)
            raise DataError(prefix + shorten(str(marker.get("cause", "no reason recorded")), max(room, 80)), fix)
        now = time.monotonic()
        if now - started > opts.wait_timeout_s:
            raise DataError("timed out after %.0f s waiting for local rank 0 on this host to prepare the data "
                            "(no completion marker from this launch at %s)."
                            % (opts.wait_timeout_s, os.path.join(root, MARKER_NAME)),
                            "see the log of local rank 0: it may still be downloading (raise "
                            "FRCNN_FETCH_WAIT_S) or it stopped without writing the marker.")
        if now >= next_log:
            LOG.info("data: waiting for local rank 0 to prepare %s (%.0f s so far)", root, now - started)
            next_log = now + 60.0
        time.sleep(opts.poll_s)


def channel_holds_extracted(channel_path, specs):
    """True when the channel has no tar to fetch but an extracted VOC<year> tree (used as is)."""
    if any(os.path.isfile(os.path.join(channel_path, s.name)) for s in specs):
        return False
    return bool(find_year_dirs(channel_path))


def acquire_voc(config, env, world, work_dir, options=None):
    """Return a directory that contains VOCdevkit/VOC2007 and VOCdevkit/VOC2012 (or, for a channel
    that already holds an extracted VOCdevkit, the channel directory itself).

    Local rank 0 of each host fetches, verifies and extracts into ``work_dir``/voc; the other ranks
    on the host wait for its completion marker. Raises DataError naming each source tried and what
    happened when the data cannot be had.
    """
    opts = options or FetchOptions.from_environ()
    if config.dataset == "coco":
        return env.require_data_dir()
    specs = tar_specs(config.data_checksums)
    channel_name, channel_path = env.data_channel()
    if channel_path and channel_holds_extracted(channel_path, specs):
        LOG.info("data: using the extracted data in channel '%s' (%s) as is", channel_name, channel_path)
        return channel_path
    sources = plan_sources(config.data_s3_uri, config.data_mirrors, channel_name, channel_path)
    root = os.path.join(os.path.abspath(work_dir), DATA_DIR_NAME)
    key = data_key(specs, sources)
    expected = expected_content(specs)
    launch = launch_token()
    os.makedirs(work_dir, exist_ok=True)
    if not world.is_local_main:
        _wait_for_host(root, key, expected, launch, opts)
        return root
    try:
        with _HostLock(os.path.join(os.path.abspath(work_dir), "." + DATA_DIR_NAME + ".lock")):
            os.makedirs(root, exist_ok=True)
            _fetch_all(specs, sources, root, key, expected, opts, launch)
    except BaseException as exc:
        _write_failure_marker(root, key, launch, exc)
        raise
    return root


# --------------------------------------------------------------------------------------------
# Generated VOC tars (tests, benchmarks, other engineers' container tests)
# --------------------------------------------------------------------------------------------

# Real tar sizes 439 MB, 430 MB, 1.9 GB: padding is shared out in the same proportion.
_PAD_WEIGHTS = {"VOCtrainval_06-Nov-2007.tar": 439, "VOCtest_06-Nov-2007.tar": 430,
                "VOCtrainval_11-May-2012.tar": 1900}
_TAR_MTIME = 1194307200  # 2007-11-06


def _tar_info(name, size=0, is_dir=False):
    info = tarfile.TarInfo(name)
    info.mtime = _TAR_MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if is_dir:
        info.type, info.mode = tarfile.DIRTYPE, 0o755
    else:
        info.size, info.mode = size, 0o644
    return info


def file_sha1(path):
    digest = hashlib.sha1()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(4 * MIB), b""):
            digest.update(block)
    return digest.hexdigest()


def make_voc_tars(directory, train_2007=48, test_2007=24, train_2012=24, seed=0, pad_bytes=0,
                  pad_file_bytes=110_000, classes=None):
    """Write the three VOC tars, built from :func:`frcnn_train.synthetic_voc.generate`, into
    ``directory`` and return {tar name: sha1}.

    Members are ``VOCdevkit/VOC2007/...`` and ``VOCdevkit/VOC2012/...`` as in the real tars (2007
    trainval: its images, annotations and trainval/train/val lists; 2007 test: the test images and
    test.txt; 2012: all of VOC2012). ``pad_bytes`` adds random-content ``pad_*.jpg`` files (listed in
    no split) shared out like the real tar sizes, for transfer benchmarks. Deterministic per seed.
    """
    from .synthetic_voc import SHAPES, generate

    os.makedirs(directory, exist_ok=True)
    work = tempfile.mkdtemp(prefix=".gen-", dir=directory)
    try:
        devkit = generate(work, train_2007, test_2007, train_2012, classes=tuple(classes or SHAPES), seed=seed)

        def ids(year, split):
            path = os.path.join(devkit, "VOC%d" % year, "ImageSets", "Main", split + ".txt")
            with open(path) as handle:
                return [line.strip() for line in handle if line.strip()]

        plan = [("VOCtrainval_06-Nov-2007.tar", 2007, ids(2007, "trainval"), ("trainval", "train", "val")),
                ("VOCtest_06-Nov-2007.tar", 2007, ids(2007, "test"), ("test",))]
        if train_2012:
            plan.append(("VOCtrainval_11-May-2012.tar", 2012, ids(2012, "trainval"), ("trainval", "train", "val")))
        rng = random.Random(seed + 7919)
        pool = rng.randbytes(8 * MIB) if pad_bytes else b""
        weights = sum(_PAD_WEIGHTS[p[0]] for p in plan)
        checksums = {}
        for name, year, image_ids, splits in plan:
            base = "VOCdevkit/VOC%d" % year
            target = os.path.join(directory, name)
            tmp = target + ".tmp"
            with tarfile.open(tmp, "w", format=tarfile.GNU_FORMAT) as archive:
                for folder in ("VOCdevkit", base, base + "/Annotations", base + "/ImageSets",
                               base + "/ImageSets/Main", base + "/JPEGImages"):
                    archive.addfile(_tar_info(folder, is_dir=True))
                src = os.path.join(devkit, "VOC%d" % year)
                for image_id in image_ids:
                    for sub, ext in (("Annotations", ".xml"), ("JPEGImages", ".jpg")):
                        path = os.path.join(src, sub, image_id + ext)
                        with open(path, "rb") as handle:
                            archive.addfile(_tar_info("%s/%s/%s%s" % (base, sub, image_id, ext),
                                                      os.path.getsize(path)), handle)
                for split in splits:
                    path = os.path.join(src, "ImageSets", "Main", split + ".txt")
                    with open(path, "rb") as handle:
                        archive.addfile(_tar_info("%s/ImageSets/Main/%s.txt" % (base, split),
                                                  os.path.getsize(path)), handle)
                share = pad_bytes * _PAD_WEIGHTS[name] // weights if pad_bytes else 0
                index = 0
                while share > 0:
                    size = min(share, max(1, int(pad_file_bytes * (0.5 + rng.random()))))
                    start = rng.randrange(0, len(pool) - size) if size < len(pool) else 0
                    data = pool[start:start + size] if size <= len(pool) else rng.randbytes(size)
                    tag = name.split("_")[0][3:].lower()  # trainval / test: unique across the tars
                    archive.addfile(_tar_info("%s/JPEGImages/pad_%d_%s_%07d.jpg" % (base, year, tag, index),
                                              len(data)), io.BytesIO(data))
                    share -= len(data)
                    index += 1
            os.replace(tmp, target)
            checksums[name] = file_sha1(target)
        return checksums
    finally:
        shutil.rmtree(work, ignore_errors=True)
