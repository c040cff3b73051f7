"""Where an archive's bytes come from: a channel file, S3, or an HTTP(S) mirror.

Each source stages one archive on local disk and hashes it while the bytes arrive (SHA-1), so the
caller can verify the whole archive before a single member is extracted:

* a channel file is read where it is (the channel is a read-only mount); it is hashed through the
  same open file that extraction later reads, so a path swapped in between changes nothing;
* S3 goes through boto3's transfer manager (s3transfer: parallel ranged GETs, its own retries and
  botocore's), writing in order into a hashing file object (s3transfer's non-seekable output path
  keeps at most ``max_in_memory_download_chunks`` parts in memory);
* an HTTP(S) mirror through a small resumable downloader: a dropped transfer resumes with ``Range``
  (``If-Range`` on the first response's validator, so a changed file starts over), retries with
  backoff; redirects are followed to http(s) only. Plain ``http://`` is only used for an archive
  whose checksum is known.

Both network sources have an overall deadline per source, enforced by shutting down the sockets the
transfer reads from (s3transfer's as well as ours), so that a source that drips bytes fails over
on time instead of stalling the job or leaving a worker blocked behind it. Disk is reserved through
the caller's ``reserve(size, arrived=0)`` before bytes are written: at once when the size is known,
step by step as bytes arrive when a server sends no length.
"""

import hashlib
import http.client
import logging
import os
import queue
import random
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass

from detector_training import settings
from detector_training.errors import DataError

LOG = logging.getLogger("detector_training")
MIB = 1 << 20
USER_AGENT = "detector-training-fetch/2"
_READ = 1 << 20


@dataclass(frozen=True)
class FetchOptions:
    """Transfer settings. The defaults suit a training job; tests shrink sizes and delays."""

    chunk_size: int = 8 * MIB  # bytes per ranged S3 request
    s3_workers: int = 8  # parallel ranged requests per archive (S3)
    extract_parallelism: int = 2  # archives extracted side by side (one downloads meanwhile)
    attempts: int = 5  # tries per request (botocore/s3transfer; HTTP: failures without progress)
    backoff_s: float = 1.0  # first HTTP retry delay; doubles per failure, with jitter
    max_backoff_s: float = 30.0
    timeout_s: float = 60.0  # connect/read timeout of one request
    deadline_s: float = 0.0  # overall time per source and archive; 0: deadline_base_s + size / min_rate
    deadline_base_s: float = 300.0
    min_rate: float = 1.0 * MIB  # bytes per second a source must at least average
    wait_timeout_s: float = 4 * 3600.0  # how long other ranks wait for local rank 0
    poll_s: float = 1.0
    progress_s: float = 30.0  # seconds between progress log lines
    disk_margin_bytes: int = 64 * MIB
    reserve_step: int = 64 * MIB  # a source that sends no length reserves disk in steps of this

    @classmethod
    def from_environ(cls, environ=None):
        """Defaults, with DETECTOR_FETCH_{WORKERS,CHUNK_MB,TIMEOUT_S,DEADLINE_S,WAIT_S,PROGRESS_S} applied."""
        environ = os.environ if environ is None else environ
        values = {}
        for key, field_name, parse in (("FETCH_WORKERS", "s3_workers", int),
                                       ("FETCH_CHUNK_MB", "chunk_size", lambda v: int(float(v) * MIB)),
                                       ("FETCH_TIMEOUT_S", "timeout_s", float),
                                       ("FETCH_WAIT_S", "wait_timeout_s", float),
                                       ("FETCH_DEADLINE_S", "deadline_s", float),
                                       ("FETCH_PROGRESS_S", "progress_s", float)):
            value = settings.setting(key, environ)
            if value:
                try:
                    values[field_name] = parse(value)
                except ValueError:
                    raise DataError("invalid %s=%r." % (settings.name(key), value),
                                    "set it to a number.") from None
        return cls(**values)

    def deadline_for(self, size):
        if self.deadline_s > 0:
            return self.deadline_s
        return self.deadline_base_s + (size if size is not None else 8 << 30) / self.min_rate


class StagingWriteError(Exception):
    """Writing the staging file failed (disk full, permissions): no other source helps."""


class SourceFailed(Exception):
    """This source cannot deliver this archive; ``reason`` is short and goes into messages."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class SourceSpec:
    kind: str  # "channel", "s3" or "http"
    location: str  # directory, s3:// URI or base URL
    label: str  # how messages name it


@dataclass
class Staged:
    """A whole archive on local disk, hashed; ``fileobj`` is open at offset 0 for extraction."""

    fileobj: object
    path: str
    size: int = 0
    sha1: str = ""
    owned: bool = True  # a staging file of ours (removed by close), not a channel file

    def close(self):
        self.fileobj.close()
        if self.owned:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass


def parse_s3_uri(uri):
    """'s3://bucket/some/prefix/' -> ('bucket', 'some/prefix/')."""
    if not uri.startswith("s3://") or len(uri) <= 5:
        raise ValueError("not an s3:// URI: %r" % uri)
    bucket, _, prefix = uri[5:].partition("/")
    if not bucket:
        raise ValueError("no bucket in %r" % uri)
    return bucket, prefix


class _HashingFile:
    """The staging file, written in order and hashed on the way by a thread of its own (on two
    cores the hash then overlaps the receiving), with a progress line now and then."""

    _RESET = object()

    def __init__(self, handle, label, size, progress_s):
        self.handle = handle
        self.label = label
        self.total = size
        self.progress_s = progress_s
        self.size = 0
        self.started = self.last_log = time.monotonic()
        self._digest = hashlib.sha1()
        self._pending = queue.Queue(maxsize=64)  # at most 64 received pieces (<= 64 MB) not hashed yet
        self._hasher = threading.Thread(target=self._hash, name="sha1", daemon=True)
        self._hasher.start()

    def _hash(self):
        while True:
            data = self._pending.get()
            if data is None:
                return
            if data is self._RESET:
                self._digest = hashlib.sha1()
            else:
                self._digest.update(data)

    def reset(self):
        """Start over (the server sent the whole file again)."""
        self.handle.seek(0)
        self.handle.truncate()
        self._pending.put(self._RESET)
        self.size = 0

    def write(self, data):
        try:
            self.handle.write(data)
        except OSError as exc:
            raise StagingWriteError("writing the staged copy of %s failed: %s" % (self.label, exc)) from exc
        self._pending.put(data)
        self.size += len(data)
        now = time.monotonic()
        if now - self.last_log >= self.progress_s:
            self.last_log = now
            rate = self.size / max(now - self.started, 1e-6)
            eta = " ETA %.0f s" % ((self.total - self.size) / rate) if self.total and rate else ""
            LOG.info("data: %s: %.1f of %s MB (%.1f MB/s)%s", self.label, self.size / MIB,
                     "%.1f" % (self.total / MIB) if self.total else "?", rate / MIB, eta)
        return len(data)

    def hexdigest(self):
        """The SHA-1 of everything written (ends the hashing thread)."""
        self.close()
        return self._digest.hexdigest()

    def close(self):
        if self._hasher.is_alive():
            self._pending.put(None)
            self._hasher.join()


def _staging_file(staging_dir, name):
    """A new private file for one archive's bytes (O_EXCL: never one that is already there)."""
    path = os.path.join(staging_dir, name + ".part")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_EXCL, 0o600)
    return Staged(os.fdopen(fd, "w+b"), path)


def _finish(staged, writer):
    staged.fileobj.flush()
    staged.fileobj.seek(0)
    staged.size, staged.sha1 = writer.size, writer.hexdigest()
    return staged


# --------------------------------------------------------------------------------------------- channel

def stage_channel_file(path):
    """Hash a channel file through the handle that extraction will read."""
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        raise SourceFailed("no file %s" % os.path.basename(path)) from None
    except OSError as exc:
        raise SourceFailed("cannot read %s (%s)" % (path, exc.strerror or exc)) from None
    digest = hashlib.sha1()
    size = 0
    try:
        for block in iter(lambda: handle.read(4 * MIB), b""):
            digest.update(block)
            size += len(block)
    except OSError as exc:
        handle.close()
        raise SourceFailed("cannot read %s (%s)" % (path, exc.strerror or exc)) from None
    handle.seek(0)
    return Staged(handle, path, size, digest.hexdigest(), owned=False)


# ------------------------------------------------------------------------------------------- deadline

class _Deadline:
    """Shuts down every socket watched under it when the time is up, whatever a read (ours or an
    s3transfer worker's) is waiting for."""

    def __init__(self, seconds):
        self.started = time.monotonic()
        self.expired = False
        self._shutdowns = []
        self._lock = threading.Lock()
        self._timer = None
        self.set(seconds)

    def set(self, seconds):
        """Counted from the start: the deadline becomes ``seconds`` after it."""
        self.cancel()
        self.seconds = seconds
        self._timer = threading.Timer(max(self.started + seconds - time.monotonic(), 0.0), self.expire)
        self._timer.daemon = True
        self._timer.start()

    def watch(self, shutdown):
        """``shutdown()`` ends a blocked read on one connection (run at once if the time is up)."""
        with self._lock:
            self._shutdowns.append(shutdown)
            if not self.expired:
                return
        self._run(shutdown)

    def expire(self):
        """The time is up (now, or because the transfer failed): shut every watched socket."""
        with self._lock:
            self.expired = True
            shutdowns = list(self._shutdowns)
        for shutdown in shutdowns:
            self._run(shutdown)

    @staticmethod
    def _run(shutdown):
        try:
            shutdown()
        except (OSError, ValueError, RuntimeError):  # already closed, or given back to its pool
            pass

    def cancel(self):
        if self._timer is not None:
            self._timer.cancel()


# -------------------------------------------------------------------------------------------------- S3

def s3_client(opts):
    """One client for the whole fetch, boto3's standard configuration (credentials, region,
    AWS_ENDPOINT_URL_S3) with standard retries and a pool wide enough for the ranged GETs."""
    import boto3
    from botocore.config import Config

    config = Config(retries={"mode": "standard", "max_attempts": opts.attempts},
                    max_pool_connections=opts.s3_workers + 2, connect_timeout=opts.timeout_s,
                    read_timeout=opts.timeout_s)
    return boto3.session.Session().client("s3", config=config)


def _s3_reason(exc):
    from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        code = str(error.get("Code", ""))
        if code in ("404", "NoSuchKey", "NotFound"):
            return "not found"
        if code in ("403", "AccessDenied", "Forbidden"):
            return "access denied (check the job role's s3:GetObject permission)"
        return "S3 error %s %s" % (code, error.get("Message", "")).strip()
    if isinstance(exc, NoCredentialsError):
        return "no AWS credentials"
    if isinstance(exc, EndpointConnectionError):
        return "cannot connect to the S3 endpoint"
    if getattr(exc, "last_exception", None) is not None:  # s3transfer's RetriesExceededError
        return "%s (after every try)" % _s3_reason(exc.last_exception)
    return "%s: %s" % (type(exc).__name__, exc)


def stage_s3(client, uri, staging_dir, name, opts, reserve):
    """Download s3://bucket/key with s3transfer (parallel ranged GETs) into a hashing staging file."""
    from boto3.s3.transfer import TransferConfig, create_transfer_manager
    from botocore.exceptions import BotoCoreError, ClientError
    from s3transfer.exceptions import RetriesExceededError, S3DownloadFailedError
    from s3transfer.subscribers import BaseSubscriber

    bucket, key = parse_s3_uri(uri)
    try:
        head = client.head_object(Bucket=bucket, Key=key)
    except (BotoCoreError, ClientError) as exc:
        raise SourceFailed(_s3_reason(exc)) from None
    size = head["ContentLength"]
    reserve(size)

    class _Known(BaseSubscriber):  # what the HEAD said; s3transfer then sends IfMatch on every range
        def on_queued(self, future, **kwargs):
            future.meta.provide_transfer_size(size)
            future.meta.provide_object_etag(head.get("ETag"))

    config = TransferConfig(multipart_threshold=opts.chunk_size, multipart_chunksize=opts.chunk_size,
                            max_concurrency=opts.s3_workers, num_download_attempts=opts.attempts,
                            io_chunksize=MIB)
    config.max_in_memory_download_chunks = max(2 * opts.s3_workers, 4)
    staged = _staging_file(staging_dir, name)
    writer = _HashingFile(staged.fileobj, uri, size, opts.progress_s)
    deadline = _Deadline(opts.deadline_for(size))

    def watch_body(http_response, **_kwargs):  # the connection this object's body streams through
        path = urllib.parse.unquote(urllib.parse.urlsplit(http_response.url).path)
        if path.endswith("/" + key):
            deadline.watch(http_response.raw.shutdown)  # urllib3's way to end a blocked read

    event, handler_id = "after-call.s3.GetObject", "detector-deadline-%d" % id(deadline)
    client.meta.events.register(event, watch_body, unique_id=handler_id)
    manager = create_transfer_manager(client, config)
    try:
        future = manager.download(bucket, key, writer, subscribers=[_Known()])
        while not future.done() and not deadline.expired:
            time.sleep(0.05)
        if deadline.expired:  # whatever the workers made of their shut sockets, the time is up
            future.cancel()
            raise SourceFailed("no complete transfer within %.0f s (%.1f of %.1f MB arrived)"
                               % (deadline.seconds, writer.size / MIB, size / MIB))
        future.result()
        if writer.size != size:
            raise SourceFailed("truncated: %d of %d bytes" % (writer.size, size))
    except BaseException as exc:
        deadline.expire()  # a worker blocked in a read returns now, so the shutdown does not wait on it
        manager.shutdown(cancel=True)
        writer.close()
        staged.close()
        if isinstance(exc, (BotoCoreError, ClientError, RetriesExceededError, S3DownloadFailedError)):
            raise SourceFailed(_s3_reason(exc)) from None
        raise
    finally:
        deadline.cancel()
        client.meta.events.unregister(event, unique_id=handler_id)
    manager.shutdown()
    return _finish(staged, writer)


# ------------------------------------------------------------------------------------------------ HTTP

class _HttpRedirects(urllib.request.HTTPRedirectHandler):
    """urllib's redirects, to http(s) only (urllib itself would follow one to ftp://)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if urllib.parse.urlsplit(newurl).scheme.lower() not in ("http", "https"):
            raise SourceFailed("redirected to %s; only http(s) redirects are followed" % newurl[:200])
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def _opener(deadline):
    """urllib with its proxies and http(s) redirects, every connection watched by ``deadline``;
    no handler for any other scheme, so nothing but http(s) can be opened."""

    def watched(base):
        class Connection(base):
            def connect(self):
                super().connect()
                sock = self.sock
                deadline.watch(lambda: sock.shutdown(socket.SHUT_RDWR))

        return Connection

    class Http(urllib.request.HTTPHandler):
        def http_open(self, req):
            return self.do_open(watched(http.client.HTTPConnection), req)

    class Https(urllib.request.HTTPSHandler):
        def https_open(self, req):
            return self.do_open(watched(http.client.HTTPSConnection), req, context=self._context)

    opener = urllib.request.OpenerDirector()
    for handler in (urllib.request.ProxyHandler(), urllib.request.UnknownHandler(), Http(), Https(),
                    urllib.request.HTTPDefaultErrorHandler(), _HttpRedirects(),
                    urllib.request.HTTPErrorProcessor()):
        opener.add_handler(handler)
    return opener


def _http_reason(exc):
    if isinstance(exc, urllib.error.HTTPError):
        return "HTTP %d %s" % (exc.code, exc.reason)
    if isinstance(exc, urllib.error.URLError):
        return "cannot connect (%s)" % (exc.reason,)
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timed out"
    return "%s%s" % (type(exc).__name__, ": %s" % exc if str(exc) else "")


def _content_range_start(value):
    # 'bytes 100-199/1000' -> (100, 1000)
    try:
        unit, _, spec = value.partition(" ")
        span, _, total = spec.partition("/")
        return int(span.split("-")[0]), (int(total) if total.strip() != "*" else None)
    except (AttributeError, ValueError):
        return None, None


PLAIN_HTTP = "plain http is used only for tars with a known checksum (data_checksums)"


def stage_http(url, staging_dir, name, opts, reserve, verified=True):
    """GET ``url`` into a hashing staging file, resuming dropped transfers, within the deadline.
    Unless the bytes will be ``verified`` against a checksum, plain http (also after a redirect)
    is refused."""
    if not verified and url.startswith("http://"):
        raise SourceFailed(PLAIN_HTTP)
    staged = _staging_file(staging_dir, name)
    writer = _HashingFile(staged.fileobj, url, None, opts.progress_s)
    deadline = _Deadline(opts.deadline_for(None))  # re-armed once the size is known
    opener = _opener(deadline)
    size, validator, failures, reserved = None, None, 0, None  # reserved: bytes of disk reserved
    try:
        while True:
            headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
            if writer.size:
                headers["Range"] = "bytes=%d-" % writer.size
                if validator:
                    headers["If-Range"] = validator
            progress_before = writer.size
            try:
                with opener.open(urllib.request.Request(url, headers=headers), timeout=opts.timeout_s) as resp:
                    if not verified and resp.url.startswith("http://"):
                        raise SourceFailed(PLAIN_HTTP + "; %s redirected to %s" % (url, resp.url))
                    if resp.status == 206:
                        start, total = _content_range_start(resp.headers.get("Content-Range"))
                        if start != writer.size:
                            raise SourceFailed("bad Content-Range %r" % resp.headers.get("Content-Range"))
                        size = total if total is not None else size
                    else:
                        if writer.size:
                            LOG.warning("data: %s ignored the range request; starting over", url)
                            writer.reset()
                        length = resp.headers.get("Content-Length")
                        size = int(length) if length and length.isdigit() else None
                        validator = resp.headers.get("ETag") or resp.headers.get("Last-Modified")
                    if reserved is None:
                        reserved = size if size is not None else opts.reserve_step
                        reserve(reserved)
                        deadline.set(opts.deadline_for(size))
                        writer.total = size
                    while True:
                        data = resp.read1(_READ)
                        if not data:
                            break
                        if writer.size + len(data) > reserved:  # no length, or more than it said
                            reserved = writer.size + len(data) + opts.reserve_step
                            reserve(reserved, writer.size)
                        writer.write(data)
                if deadline.expired:  # the watchdog closed the socket: what arrived is not the end
                    raise SourceFailed("no complete transfer within %.0f s (%.1f MB arrived)"
                                       % (deadline.seconds, writer.size / MIB))
                if size is None or writer.size >= size:
                    break
                raise http.client.IncompleteRead(b"", size - writer.size)
            except SourceFailed:
                raise
            except urllib.error.HTTPError as exc:
                if exc.code < 500 and exc.code not in (408, 429):
                    raise SourceFailed(_http_reason(exc)) from None
                reason = _http_reason(exc)
            except (OSError, http.client.HTTPException, ValueError) as exc:
                reason = _http_reason(exc)
            if deadline.expired:
                raise SourceFailed("no complete transfer within %.0f s (%.1f MB arrived)"
                                   % (deadline.seconds, writer.size / MIB))
            failures = 1 if writer.size > progress_before else failures + 1
            if failures >= opts.attempts:
                raise SourceFailed("%s (after %d tries)" % (reason, failures))
            delay = min(opts.max_backoff_s, opts.backoff_s * 2 ** (failures - 1)) * (0.5 + random.random() / 2)
            LOG.warning("data: %s: %s at %d bytes; retrying in %.1f s", url, reason, writer.size, delay)
            time.sleep(delay)
        if size is not None and writer.size != size:
            raise SourceFailed("%d bytes arrived, %d were announced" % (writer.size, size))
        return _finish(staged, writer)
    except BaseException:
        writer.close()
        staged.close()
        raise
    finally:
        deadline.cancel()
