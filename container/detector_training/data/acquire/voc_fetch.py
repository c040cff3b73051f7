"""Pascal VOC acquisition: the data channel, then S3, then HTTP(S) mirrors, once per host.

:func:`acquire_voc` returns a directory holding ``VOCdevkit/VOC2007`` and ``VOCdevkit/VOC2012``.

Per tar, the sources are tried in order (channel, ``data_s3_uri``, each of ``data_mirrors``); each
one only when the one before failed, for any reason: unreachable, missing, truncated, a checksum
that does not match, not a tar, or a member the extraction policy refuses.

Verify, then extract: a source stages the whole tar on local disk, hashing it as it arrives
(:mod:`detector_training.data.acquire.sources`); only a tar whose SHA-1 matched is opened as an archive, and it is
extracted by Python's tarfile under a strict policy (:mod:`detector_training.core.archive`) into a private
directory whose VOC tree is then moved into place. Tars overlap across each other, never within
one: the largest is fetched first, and while one tar is extracted the next one downloads
(``extract_parallelism`` tars are extracted side by side).

Local rank 0 of each host does this under a lock; the other ranks wait for its completion marker
(:mod:`detector_training.data.acquire.host_once`). A directory completed earlier with the same tars and checksums
is reused without a request.
"""

import collections
import concurrent.futures
import contextlib
import hashlib
import heapq
import json
import logging
import os
import shutil
import threading
import time
from dataclasses import dataclass
from typing import Optional

from detector_training.core import archive
from detector_training.data.acquire import host_once, sources
from detector_training.errors import DataError, shorten
from detector_training.data.acquire.sources import FetchOptions, SourceFailed, SourceSpec  # noqa: F401  (FetchOptions: the public knobs)
from detector_training.data.acquire.voc_tree import (VOC_TAR_MB, VOC_TARS, check_voc_tree, expected_content, find_year_dirs,
                         short_tar)

LOG = logging.getLogger("detector_training")

OFFICIAL = "official"
OFFICIAL_BASE = "http://host.robots.ox.ac.uk/pascal/VOC"
OFFICIAL_DIRS = {"VOCtrainval_06-Nov-2007.tar": "voc2007", "VOCtest_06-Nov-2007.tar": "voc2007",
                 "VOCtrainval_11-May-2012.tar": "voc2012"}
DATA_DIR_NAME = "voc"  # <work_dir>/voc/VOCdevkit/VOC20xx
DATA_CHANNELS = ("voc", "train", "training")  # 'training' is what fit("s3://...") names it
STAGING_DIR_NAME = ".staging"  # downloads in progress, and the private extraction directories
FAILURE_BUDGET = 900  # characters of the whole failure text (it becomes /opt/ml/output/failure)
MIB = 1 << 20


# ------------------------------------------------------------------------------------ pure functions

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


def fetch_order(specs):
    """The largest known tar first (its extraction is the longest), the others in their order."""
    return sorted(specs, key=lambda s: -VOC_TAR_MB.get(s.name, 0))


def mirror_url(base, name):
    """Where a mirror holds a tar: the official Oxford layout for 'official', else <base>/<name>."""
    if base == OFFICIAL:
        return "%s/%s/%s" % (OFFICIAL_BASE, OFFICIAL_DIRS.get(name, "voc2012"), name)
    return base.rstrip("/") + "/" + name


def plan_sources(data_s3_uri, data_mirrors, channel_name=None, channel_path=None):
    """The sources in the order they are tried: channel, S3, then each mirror."""
    planned = []
    if channel_path:
        planned.append(SourceSpec("channel", channel_path, "channel '%s'" % channel_name))
    if data_s3_uri:
        uri = data_s3_uri if data_s3_uri.endswith("/") else data_s3_uri + "/"
        planned.append(SourceSpec("s3", uri, uri))
    for base in data_mirrors:
        base = base.strip()
        if not base:
            continue
        if base == OFFICIAL:
            planned.append(SourceSpec("http", OFFICIAL, "official mirror (host.robots.ox.ac.uk)"))
        elif base.startswith(("http://", "https://")):
            planned.append(SourceSpec("http", base.rstrip("/"), base.rstrip("/")))
        else:
            raise DataError("data_mirrors has %r, which is not an http(s):// URL or 'official'." % base,
                            "list mirror base URLs, e.g. data_mirrors=https://mirror.example/voc,official.")
    return planned


def data_key(specs, planned):
    """What a completed data directory was built from: the tar names and checksums (and, for
    unverified tars, the sources, since only they then say what the bytes are)."""
    payload = {"format": host_once.MARKER_FORMAT, "tars": [[s.name, s.sha1] for s in specs]}
    if any(s.sha1 is None for s in specs):
        payload["sources"] = [[s.kind, s.location] for s in planned]
    return hashlib.sha1(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:20]


def failure_text(failed_tars, attempts, fix, budget=FAILURE_BUDGET):
    """The cause of a DataError when no source delivered ``failed_tars``.

    ``attempts`` is [(source label, tar name, reason)] in the order tried; the text names every
    source and what happened, grouped per source, shortened so that 'DataError: <cause> Fix: <fix>'
    stays within ``budget`` characters.
    """
    groups = collections.OrderedDict()
    for label, tar, reason in attempts:
        groups.setdefault(label, collections.OrderedDict()).setdefault(reason, []).append(tar)
    head = "could not get %s: every source failed. Tried: " % ", ".join(failed_tars)
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


def human_bytes(n):
    for unit, size in (("GB", 1 << 30), ("MB", MIB), ("KB", 1 << 10)):
        if n >= size:
            return "%.1f %s" % (n / float(size), unit)
    return "%d B" % n


# --------------------------------------------------------------------------------------- the fetch

class _Cancelled(Exception):
    pass


class _DiskBudget:
    """Free space is checked before each download and each extraction, counting the others."""

    def __init__(self, path, margin):
        self._path = path
        self._margin = margin
        self._lock = threading.Lock()
        self._reserved = {}

    def reserve(self, name, need, what, on_disk=0):
        """Reserve ``need`` bytes for ``name`` (replacing its earlier reservation), of which
        ``on_disk`` are already written (and so no longer free); DataError when they do not fit."""
        need = int(need) + self._margin
        with self._lock:
            free = shutil.disk_usage(self._path).free + on_disk
            others = sum(v for k, v in self._reserved.items() if k != name)
            if free - others < need:
                raise DataError(
                    "not enough free disk space under %s to %s %s: it needs about %s%s and %s are free."
                    % (self._path, what, name, human_bytes(need),
                       " besides %s for the other tars under way" % human_bytes(others) if others else "",
                       human_bytes(free)),
                    "give the job a larger volume (VolumeSizeInGB / volume_size) or free space under %s."
                    % self._path)
            self._reserved[name] = need

    def release(self, name):
        with self._lock:
            self._reserved.pop(name, None)


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


class _TurnSlot:
    """One holder at a time; among the waiters, the earliest in fetch order goes first."""

    def __init__(self):
        self._cond = threading.Condition()
        self._busy = False
        self._waiting = []

    @contextlib.contextmanager
    def hold(self, turn):
        with self._cond:
            heapq.heappush(self._waiting, turn)
            while self._busy or self._waiting[0] != turn:
                self._cond.wait()
            heapq.heappop(self._waiting)
            self._busy = True
        try:
            yield
        finally:
            with self._cond:
                self._busy = False
                self._cond.notify_all()


class _Fetch:
    """Local rank 0's fetch of the tars that are not in place yet."""

    def __init__(self, root, planned, opts):
        self.root = root
        self.planned = planned
        self.opts = opts
        self.staging = os.path.join(root, STAGING_DIR_NAME)
        self.disk = _DiskBudget(root, opts.disk_margin_bytes)
        self.download_slot = _TurnSlot()  # one download at a time (it has the bandwidth), in fetch order
        self.extract_slots = threading.BoundedSemaphore(max(1, opts.extract_parallelism))
        self.place_lock = threading.Lock()
        self.abort = threading.Event()
        self.s3 = sources.s3_client(opts) if any(s.kind == "s3" for s in planned) else None

    def stage(self, source, spec):
        """The whole tar from ``source`` on local disk, hashed (SourceFailed if it cannot)."""
        def reserve(size, arrived=0):  # the staged tar, and (about) as much again extracted
            what = "download and extract" if not arrived else \
                "go on downloading (no length announced; %s arrived) and extract" % human_bytes(arrived)
            self.disk.reserve(spec.name, 2 * size, what, on_disk=arrived)

        if source.kind == "channel":
            return sources.stage_channel_file(os.path.join(source.location, spec.name))
        if source.kind == "s3":
            return sources.stage_s3(self.s3, source.location + spec.name, self.staging, spec.name, self.opts,
                                    reserve)
        return sources.stage_http(mirror_url(source.location, spec.name), self.staging, spec.name, self.opts,
                                  reserve, verified=bool(spec.sha1))

    def extract_and_place(self, spec, staged, label):
        def before_write(expanded):
            self.disk.reserve(spec.name, expanded, "extract")

        extracted = archive.extract(staged.fileobj, self.staging, before_write=before_write)
        try:
            years = find_year_dirs(extracted.path)
            if not years:
                top = sorted(os.listdir(extracted.path))[:5]
                raise SourceFailed("holds no VOC<year> directory (top level: %s)" % (", ".join(top) or "nothing"))
            with self.place_lock:
                for name, path in sorted(years.items()):
                    _merge_tree(path, os.path.join(self.root, "VOCdevkit", name))
            return {"sha1": staged.sha1, "source": label, "bytes": staged.size, "files": extracted.files}
        finally:
            shutil.rmtree(extracted.path, ignore_errors=True)

    def one_tar(self, turn, spec):
        """Try the sources in order until one delivers a verified, safe tar; return its record.
        Raises _TarFailed with every attempt, DataError for what no source can fix (disk)."""
        attempts = []
        for source in self.planned:
            if self.abort.is_set():
                raise _Cancelled()
            started = time.monotonic()
            try:
                with self.download_slot.hold(turn):
                    staged = self.stage(source, spec)
                try:
                    if spec.sha1 and staged.sha1 != spec.sha1:
                        raise SourceFailed("SHA-1 mismatch (got %s, expected %s; not extracted)"
                                           % (staged.sha1[:12], spec.sha1[:12]))
                    with self.extract_slots:
                        record = self.extract_and_place(spec, staged, source.label)
                finally:
                    staged.close()
                    self.disk.release(spec.name)
            except SourceFailed as exc:
                reason = exc.reason
            except archive.UnsafeArchive as exc:
                reason = "refused: %s" % exc.reason
            except archive.UnreadableArchive as exc:
                reason = exc.reason
            else:
                seconds = time.monotonic() - started
                LOG.info("data: %s from %s: %s in %.1f s, SHA-1 %s, %d files", spec.name, source.label,
                         human_bytes(record["bytes"]), seconds,
                         "verified" if spec.sha1 else "not checked (data_checksums=none)", record["files"])
                return record
            attempts.append((source.label, spec.name, reason))
            LOG.warning("data: %s: %s failed: %s (nothing of it was kept)%s", spec.name, source.label, reason,
                        "; trying the next source" if source is not self.planned[-1] else "")
        raise _TarFailed(attempts)

    def run(self, todo):
        records, failures, fatal = {}, [], None
        os.makedirs(self.staging, exist_ok=True)
        with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, len(todo)), thread_name_prefix="voc-tar") as pool:
            futures = {}
            for turn, spec in enumerate(todo):
                futures[pool.submit(self.one_tar, turn, spec)] = spec
            for future in concurrent.futures.as_completed(futures):
                spec = futures[future]
                try:
                    records[spec.name] = future.result()
                except _TarFailed as exc:
                    failures.append((spec.name, exc.attempts))
                except _Cancelled:
                    pass
                except BaseException as exc:  # no other source helps (disk, permissions): stop the others
                    fatal = fatal or exc
                    self.abort.set()
        shutil.rmtree(self.staging, ignore_errors=True)
        if isinstance(fatal, (OSError, sources.StagingWriteError)):
            raise DataError("writing the data under %s failed: %s" % (self.root, fatal),
                            "check the free space and permissions of %s." % self.root) from fatal
        if fatal is not None:
            raise fatal
        return records, failures


class _TarFailed(Exception):
    def __init__(self, attempts):
        super().__init__("every source failed")
        self.attempts = attempts


_FIX_SOURCES = ("put the tars (or an extracted VOCdevkit) in the 'voc' channel, or set data_s3_uri to an "
                "S3 prefix holding them, or data_mirrors to a reachable HTTP(S) mirror; if the tars are "
                "not the official VOC ones, set data_checksums.")


def _fetch_all(specs, planned, root, key, expected, opts, launch):
    """Local rank 0: reuse a complete directory, or fetch the tars into an empty one; write the marker.
    (What an interrupted fetch left is not resumed: on SageMaker a restarted job never finds it.)"""
    marker = host_once.read_marker(root)
    if host_once.marker_state(marker, key, launch) == "ok":
        summary, problems = check_voc_tree(root, expected)
        if not problems and summary == marker.get("tree"):
            LOG.info("data: %s is complete (marker from %s); reusing it without fetching", root,
                     time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(marker.get("time", 0))))
            return
        LOG.info("data: %s has a marker but the tree changed (%s); fetching again", root,
                 "; ".join(problems) or "file counts differ")
    if os.listdir(root):  # another data set, or what an interrupted fetch left: start empty
        LOG.info("data: clearing %s (no complete data set from these tars there)", root)
        shutil.rmtree(root)
        os.makedirs(root)
    todo = fetch_order(specs)
    LOG.info("data: fetching %s into %s; sources in order: %s", ", ".join(s.name for s in todo), root,
             ", ".join(s.label for s in planned) or "none")
    started = time.monotonic()
    records, failures = _Fetch(root, planned, opts).run(todo)
    if failures:
        order = [s.name for s in specs]
        failures.sort(key=lambda f: order.index(f[0]))
        labels = [s.label for s in planned]
        attempts = sorted((a for _, tar_attempts in failures for a in tar_attempts),
                          key=lambda a: labels.index(a[0]) if a[0] in labels else len(labels))
        raise DataError(failure_text([f[0] for f in failures], attempts, _FIX_SOURCES), _FIX_SOURCES)
    summary, problems = check_voc_tree(root, expected)
    if problems:
        raise DataError("the extracted data under %s is incomplete: %s." % (root, "; ".join(problems)),
                        "check that the tars are the VOC ones (or a custom dataset in the VOC layout with "
                        "Annotations, JPEGImages and ImageSets/Main split files).")
    total = sum(r["bytes"] for r in records.values())
    seconds = time.monotonic() - started
    host_once.write_marker(root, status="ok", key=key, launch=launch, tars=records, tree=summary)
    LOG.info("data: ready in %s (%s fetched in %.1f s, %.1f MB/s): %s", root, human_bytes(total), seconds,
             total / MIB / max(seconds, 1e-6),
             ", ".join("%s %d images" % (y, s["JPEGImages"]) for y, s in sorted(summary.items())))


def channel_holds_extracted(channel_path, specs):
    """True when the channel has no tar to fetch but an extracted VOC<year> tree (used as is)."""
    if any(os.path.isfile(os.path.join(channel_path, s.name)) for s in specs):
        return False
    return bool(find_year_dirs(channel_path))


def acquire_voc(config, env, world, work_dir, options=None, channels=DATA_CHANNELS,
                mirrors=None):
    """Return a directory that contains VOCdevkit/VOC2007 and VOCdevkit/VOC2012 (or, for a channel
    that already holds an extracted VOCdevkit, the channel directory itself). The tars come from
    the first of ``channels``, then data_s3_uri, then ``mirrors`` (default: data_mirrors).

    Local rank 0 of each host fetches, verifies and extracts into ``work_dir``/voc; the other ranks
    on the host wait for its completion marker. Raises DataError naming each source tried and what
    happened when the data cannot be had.
    """
    opts = options or FetchOptions.from_environ()
    specs = tar_specs(config.data_checksums)
    channel_name, channel_path = env.data_channel(channels)
    if channel_path and channel_holds_extracted(channel_path, specs):
        LOG.info("data: using the extracted data in channel '%s' (%s) as is", channel_name, channel_path)
        return channel_path
    mirrors = config.data_mirrors if mirrors is None else mirrors
    planned = plan_sources(config.data_s3_uri, mirrors, channel_name, channel_path)
    if not planned:
        raise DataError("no data source: no 'voc' (or 'train', 'training') channel, no data_s3_uri and no "
                        "data_mirrors.", _FIX_SOURCES)
    root = os.path.join(os.path.abspath(work_dir), DATA_DIR_NAME)
    key = data_key(specs, planned)
    expected = expected_content(s.name for s in specs)
    launch = host_once.launch_token(env.environ)
    os.makedirs(work_dir, exist_ok=True)
    if not world.is_local_main:
        def ready(marker):
            summary, problems = check_voc_tree(root, expected)
            return not problems and summary == marker.get("tree")

        host_once.wait_for_host(root, key, launch, ready, opts.wait_timeout_s, opts.poll_s)
        return root
    try:
        with host_once.HostLock(os.path.join(os.path.abspath(work_dir), "." + DATA_DIR_NAME + ".lock")):
            host_once.real_directory(root)
            _fetch_all(specs, planned, root, key, expected, opts, launch)
    except BaseException as exc:
        host_once.write_failure_marker(root, key, launch, exc)
        raise
    return root
