"""Byte sources: a channel file, S3 (moto's server on 127.0.0.1, through boto3/s3transfer) and HTTP
mirrors (tests/fault_http_server.py on 127.0.0.1), each staging a whole archive with its SHA-1."""

import hashlib
import os
import re
import socket
import threading
import time
from dataclasses import replace

import pytest

from conftest import use_s3_endpoint
from fault_http_server import FaultServer
from detector_training.data.acquire import sources
from detector_training.data.acquire.sources import FetchOptions, SourceFailed, StagingWriteError
from detector_training.errors import DataError

FAST = FetchOptions(chunk_size=5 << 20, s3_workers=3, attempts=3, backoff_s=0.01, max_backoff_s=0.05,
                    timeout_s=5, progress_s=0.2)
DATA = os.urandom(3 << 20) + b"tail"
HANG_S = 60  # far past every deadline these tests set: a bound that only catches a hang
SHA1 = hashlib.sha1(DATA).hexdigest()


def read_staged(staged):
    data = staged.fileobj.read()
    staged.fileobj.seek(0)
    return data


@pytest.fixture
def mirror():
    with FaultServer() as server:
        server.put("a/data.tar", DATA)
        yield server


@pytest.fixture
def staging(tmp_path):
    path = tmp_path / "staging"
    path.mkdir()
    return str(path)


def stage_http(mirror, staging, opts=FAST, reserved=None, path="a/data.tar"):
    return sources.stage_http(mirror.url(path), staging, "data.tar", opts,
                              (reserved if reserved is not None else []).append)


# ------------------------------------------------------------------------------------------- HTTP

def test_http_stages_the_whole_file_with_its_sha1_and_reserves_its_size(mirror, staging):
    reserved = []
    staged = stage_http(mirror, staging, reserved=reserved)
    assert (staged.size, staged.sha1, reserved) == (len(DATA), SHA1, [len(DATA)])
    assert read_staged(staged) == DATA
    assert os.stat(staged.path).st_mode & 0o777 == 0o600
    staged.close()
    assert os.listdir(staging) == []


def test_a_dropped_transfer_resumes_where_it_stopped(mirror, staging, caplog):
    mirror.fail("a/data.tar", drop_after=1_000_000, times=2)
    staged = stage_http(mirror, staging)
    assert staged.sha1 == SHA1
    gets = mirror.gets("a/data.tar")
    assert [g["range"] for g in gets] == [None, "bytes=1000000-", "bytes=2000000-"]
    assert [g["status"] for g in gets] == [200, 206, 206]
    assert mirror.bytes_sent("a/data.tar") == len(DATA)  # no byte twice
    staged.close()


def test_a_server_without_ranges_starts_over(staging):
    with FaultServer(ranges=False) as plain:
        plain.put("a/data.tar", DATA)
        plain.fail("a/data.tar", drop_after=500_000)
        staged = stage_http(plain, staging)
        assert staged.sha1 == SHA1 and staged.size == len(DATA)
        assert [g["sent"] for g in plain.gets("a/data.tar")] == [500_000, len(DATA)]
        staged.close()


def test_a_file_changed_between_attempts_starts_over_with_if_range(mirror, staging):
    changed = os.urandom(len(DATA))
    mirror.fail("a/data.tar", drop_after=700_000)

    class NewVersionAfterFirstGet(dict):  # the mirror gets a new version while we are away
        def get(self, key, default=None):
            if key == "/a/data.tar" and mirror.gets("a/data.tar"):
                return changed
            return dict.get(self, key, default)

    mirror.files = NewVersionAfterFirstGet(mirror.files)
    staged = stage_http(mirror, staging)
    assert staged.sha1 == hashlib.sha1(changed).hexdigest()
    assert read_staged(staged) == changed
    second = mirror.gets("a/data.tar")[1]
    assert second["range"] == "bytes=700000-" and second["status"] == 200
    staged.close()


def test_client_errors_fail_at_once_and_server_errors_after_the_tries(mirror, staging):
    with pytest.raises(SourceFailed, match="HTTP 404"):
        stage_http(mirror, staging, path="a/missing.tar")
    assert len(mirror.gets("a/missing.tar")) == 1
    mirror.fail("a/data.tar", status=503)
    with pytest.raises(SourceFailed, match=r"HTTP 503 .*\(after 3 tries\)"):
        stage_http(mirror, staging)
    assert len(mirror.gets("a/data.tar")) == FAST.attempts
    assert os.listdir(staging) == []


def given_up(fetch, hung):
    """Run ``fetch`` in a thread for at most HANG_S; the exceptions it ended with (failing with
    ``hung`` when it is still running)."""
    outcome = []

    def run():
        try:
            fetch()
        except Exception as exc:  # pylint: disable=broad-except
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(HANG_S)
    assert not worker.is_alive(), hung
    return outcome


def test_a_dripping_source_fails_at_its_deadline(mirror, staging):
    mirror.fail("a/data.tar", drip_s=0.01)
    # The whole drip would take hours: a minute only catches a source that was never given up.
    outcome = given_up(lambda: stage_http(mirror, staging, FetchOptions(
        deadline_s=1.5, timeout_s=5, attempts=3, backoff_s=0.01)),
        "the dripping source was not given up at its deadline")
    assert isinstance(outcome[0], SourceFailed) and "no complete transfer within 2 s" in outcome[0].reason
    assert 0 < mirror.bytes_sent("a/data.tar") < HANG_S / 0.01
    assert os.listdir(staging) == []


def test_the_default_deadline_grows_with_the_size():
    opts = FetchOptions(deadline_base_s=100, min_rate=1 << 20)
    assert opts.deadline_for(50 << 20) == 150
    assert FetchOptions(deadline_s=7).deadline_for(50 << 20) == 7
    assert opts.deadline_for(None) > opts.deadline_for(1 << 30)


def test_a_stalled_transfer_times_out_and_resumes(mirror, staging):
    # A stall far longer than the 1 s read timeout: the whole file before the stall ends means the
    # read timed out and the transfer resumed, however slow the machine.
    mirror.fail("a/data.tar", drop_after=300_000, stall_s=HANG_S)
    started = time.monotonic()
    staged = stage_http(mirror, staging, FetchOptions(timeout_s=1, attempts=3, backoff_s=0.01))
    assert staged.sha1 == SHA1 and time.monotonic() - started < HANG_S
    assert mirror.gets("a/data.tar")[1]["range"] == "bytes=300000-"
    staged.close()


def test_a_staging_write_failure_is_not_taken_for_a_network_error():
    with open("/dev/full", "wb", buffering=0) as full:
        writer = sources._HashingFile(full, "x", None, 30)
        with pytest.raises(StagingWriteError, match="No space left"):
            writer.write(b"x" * 10)
        writer.close()


# -------------------------------------------------------------------------------------------- channel

def test_a_channel_file_is_hashed_through_the_handle_extraction_reads(tmp_path):
    path = tmp_path / "data.tar"
    path.write_bytes(DATA)
    staged = sources.stage_channel_file(str(path))
    assert (staged.size, staged.sha1, staged.owned) == (len(DATA), SHA1, False)
    os.replace(str(path), str(tmp_path / "moved"))
    path.write_bytes(b"swapped in after the hash")
    assert read_staged(staged) == DATA  # the verified bytes, not whatever the path names now
    staged.close()
    assert path.exists()  # a channel file is never removed
    with pytest.raises(SourceFailed, match="no file other.tar"):
        sources.stage_channel_file(str(tmp_path / "other.tar"))


# ------------------------------------------------------------------------------------------------- S3

def test_s3_stages_in_parallel_ranges_in_order_with_the_sha1(s3, staging):
    client, bucket = s3
    big = DATA * 4  # 12 MB: three 5 MB ranges
    client.put_object(Bucket=bucket, Key="p/data.tar", Body=big)
    reserved, ranges = [], []
    ours = sources.s3_client(FAST)
    ours.meta.events.register("before-parameter-build.s3.GetObject",
                             lambda params, **_: ranges.append((params.get("Range"), params.get("IfMatch"))))
    staged = sources.stage_s3(ours, "s3://%s/p/data.tar" % bucket, staging, "data.tar", FAST, reserved.append)
    assert (staged.size, staged.sha1, reserved) == (len(big), hashlib.sha1(big).hexdigest(), [len(big)])
    assert read_staged(staged) == big
    etag = client.head_object(Bucket=bucket, Key="p/data.tar")["ETag"]
    assert sorted(ranges) == [("bytes=0-5242879", etag), ("bytes=10485760-", etag),
                              ("bytes=5242880-10485759", etag)]
    staged.close()
    assert os.listdir(staging) == []


def test_s3_missing_object_or_bucket_is_a_short_reason(s3, staging):
    client, bucket = s3
    ours = sources.s3_client(FAST)
    with pytest.raises(SourceFailed, match="^not found$"):
        sources.stage_s3(ours, "s3://%s/none.tar" % bucket, staging, "x", FAST, lambda size: None)
    with pytest.raises(SourceFailed, match="not found|NoSuchBucket"):
        sources.stage_s3(ours, "s3://no-such-bucket-here/none.tar", staging, "x", FAST, lambda size: None)
    assert os.listdir(staging) == []


@pytest.fixture
def https_redirect(tmp_path, monkeypatch, mirror):
    """An HTTPS server on 127.0.0.1 (a certificate made here, trusted through SSL_CERT_FILE) that
    redirects every GET to the plain-http mirror."""
    import datetime
    import ssl
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(1).not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(__import__("ipaddress").ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_path))

    class Redirect(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            self.send_response(302)
            self.send_header("Location", mirror.url(self.path))
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert_path), str(key_path))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield "https://127.0.0.1:%d" % server.server_address[1]
    server.shutdown()
    server.server_close()


def test_plain_http_is_refused_without_a_checksum_also_after_a_redirect(mirror, staging, https_redirect):
    with pytest.raises(SourceFailed, match="plain http is used only for tars with a known checksum"):
        sources.stage_http(mirror.url("a/data.tar"), staging, "x", FAST, lambda size: None, verified=False)
    assert mirror.gets("a/data.tar") == []  # not even asked
    url = https_redirect + "/a/data.tar"
    staged = sources.stage_http(url, staging, "x", FAST, lambda size: None, verified=True)
    assert staged.sha1 == SHA1  # https -> http is followed when the checksum will be checked
    staged.close()
    with pytest.raises(SourceFailed, match="redirected to http://127.0.0.1"):
        sources.stage_http(url, staging, "x", FAST, lambda size: None, verified=False)
    assert os.listdir(staging) == []


# ------------------------------------------------------------------------- sources that stall or wander

def test_a_dripping_s3_source_fails_at_its_deadline_without_waiting_on_its_worker(staging, monkeypatch, tmp_path):
    with FaultServer() as fake_s3:  # answers S3's HEAD and GET by path (bucket/key)
        fake_s3.put("bucket/data.tar", DATA)
        fake_s3.fail("bucket/data.tar", drip_s=0.01)
        use_s3_endpoint(monkeypatch, tmp_path, fake_s3.url())
        opts = FetchOptions(deadline_s=1.5, timeout_s=5, attempts=2)
        client = sources.s3_client(opts)
        # A worker blocked on the drip would read for hours: a minute only catches that wait.
        outcome = given_up(lambda: sources.stage_s3(client, "s3://bucket/data.tar", staging,
                                                    "data.tar", opts, lambda size: None),
                           "the cancelled transfer waited on its dripping worker")
    assert isinstance(outcome[0], SourceFailed) and "no complete transfer within 2 s" in outcome[0].reason
    assert 0 < fake_s3.bytes_sent("bucket/data.tar") < HANG_S / 0.01
    assert os.listdir(staging) == []


@pytest.mark.parametrize("location", ["ftp://127.0.0.1:%d/data.tar", "file:///etc/passwd?%d"])
def test_a_redirect_to_another_scheme_is_refused_without_following_it(mirror, staging, location):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.3)
    location = location % listener.getsockname()[1]
    mirror.fail("a/data.tar", redirect=location)
    with pytest.raises(SourceFailed, match="redirected to %s; only http|Redirection to url '%s' is not allowed"
                       % (re.escape(location), re.escape(location))):
        stage_http(mirror, staging)
    with pytest.raises(socket.timeout):  # nobody came to the ftp address
        listener.accept()
    listener.close()
    assert len(mirror.gets("a/data.tar")) == 1 and os.listdir(staging) == []


def test_a_source_without_a_length_reserves_disk_as_bytes_arrive_and_stops_at_the_budget(staging):
    with FaultServer(length=False) as plain:
        plain.put("a/data.tar", DATA)
        calls = []

        def reserve(size, arrived=0):  # a budget of 2 MB, as the fetch's free-disk budget answers
            calls.append((size, arrived))
            if size > 2 << 20:
                raise DataError("not enough free disk space", "free some.")

        with pytest.raises(DataError):
            sources.stage_http(plain.url("a/data.tar"), staging, "data.tar", replace(FAST, reserve_step=1 << 20),
                               reserve)
        assert calls[0] == (1 << 20, 0) and len(calls) >= 2
        assert all(arrived < size for size, arrived in calls[1:]) and calls[-1][1] <= 2 << 20
        assert os.listdir(staging) == []
        staged = sources.stage_http(plain.url("a/data.tar"), staging, "data.tar", FAST, lambda *a: None)
        assert staged.sha1 == SHA1  # within the budget the whole file arrives
        staged.close()
