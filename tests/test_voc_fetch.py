"""VOC acquisition: sources in order, verification, once per host, safe extraction.

Everything talks to 127.0.0.1 only: S3 is moto's server (ThreadedMotoServer) on an ephemeral port,
mirrors are tests/fault_http_server.py. The tars are generated (a few MB) once per module.
"""

import dataclasses
import io
import json
import logging
import os
import shutil
import tarfile
import threading
import time
import uuid

import pytest

from fault_http_server import FaultServer
from frcnn_train import voc_fetch
from frcnn_train.config import from_hyperparameters
from frcnn_train.distributed import World
from frcnn_train.errors import DataError
from frcnn_train.safe_tar import member_problem
from frcnn_train.sm_env import Environment, JobPaths
from frcnn_train.synthetic_voc import generate
from frcnn_train.voc_fetch import (OFFICIAL, FetchOptions, SourceSpec, TarSpec, acquire_voc,
                                   check_voc_tree, data_key, failure_text, make_voc_tars, marker_state,
                                   mirror_url, parse_s3_uri, plan_sources, s3_key, tar_specs)

V07, T07, V12 = "VOCtrainval_06-Nov-2007.tar", "VOCtest_06-Nov-2007.tar", "VOCtrainval_11-May-2012.tar"
TARS = (V07, T07, V12)
FAST = FetchOptions(chunk_size=256 * 1024, s3_workers=3, http_workers=3, attempts=3, backoff_s=0.01,
                    max_backoff_s=0.05, timeout_s=5, wait_timeout_s=30, poll_s=0.05, progress_s=0.5)
# The extraction variants: in this process (default), a child process fed by a pipe (bodies move
# by splice), tarfile's filter on every member.
MODES = {"in_process": FAST, "child": dataclasses.replace(FAST, extract_subprocess=True),
         "filter_every_member": dataclasses.replace(FAST, filter_every_member=True)}


# ------------------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="module")
def voc_tars(tmp_path_factory):
    """The three tars (~3.5 MB together, 2012 the largest) and their SHA-1s."""
    directory = tmp_path_factory.mktemp("tars")
    sums = make_voc_tars(str(directory), train_2007=16, test_2007=8, train_2012=12, seed=3,
                         pad_bytes=3 << 20)
    data = {name: (directory / name).read_bytes() for name in sums}
    return {"dir": str(directory), "sha1": sums, "data": data}


def job(tmp_path, voc_tars=None, channel_tars=(), **hyperparameters):
    """(config, env, work_dir): a SageMaker tree whose 'voc' channel holds ``channel_tars``."""
    base = tmp_path / "opt_ml"
    (base / "input" / "config").mkdir(parents=True, exist_ok=True)
    if channel_tars:
        channel = base / "input" / "data" / "voc"
        channel.mkdir(parents=True, exist_ok=True)
        for name in channel_tars:
            shutil.copy(os.path.join(voc_tars["dir"], name), str(channel / name))
    hps = {"dataset": "custom", "data_mirrors": ""}
    if voc_tars is not None:
        hps["data_checksums"] = json.dumps(voc_tars["sha1"])
    hps.update(hyperparameters)
    return from_hyperparameters(hps), Environment(paths=JobPaths(str(base))), str(tmp_path / "work")


def marker(root):
    with open(os.path.join(root, voc_fetch.MARKER_NAME)) as handle:
        return json.load(handle)


def assert_complete(root, voc_tars):
    """The tree GluonCV reads, with every member of the tars byte for byte."""
    assert os.path.isdir(os.path.join(root, "VOCdevkit", "VOC2007"))
    assert os.path.isdir(os.path.join(root, "VOCdevkit", "VOC2012"))
    for name in TARS:
        with tarfile.open(fileobj=io.BytesIO(voc_tars["data"][name])) as archive:
            members = [m for m in archive.getmembers() if m.isfile()]
            assert members
            for member in members[:: max(1, len(members) // 12)] + members[-1:]:
                with open(os.path.join(root, member.name), "rb") as handle:
                    assert handle.read() == archive.extractfile(member).read(), member.name
    leftovers = [e for e in os.listdir(root) if e.startswith(voc_fetch.PARTIAL_PREFIX)]
    assert leftovers == []
    state = marker(root)
    assert state["status"] == "ok"
    for name in TARS:
        assert state["tars"][name]["sha1"] == voc_tars["sha1"][name]


@pytest.fixture(scope="module")
def moto_server():
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    yield "http://%s:%d" % server.get_host_and_port()
    server.stop()


@pytest.fixture
def s3(moto_server, monkeypatch, tmp_path):
    """A fresh bucket on the loopback moto endpoint; boto3 reaches it through AWS_ENDPOINT_URL_S3."""
    import boto3

    for var in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION", "HTTP_PROXY", "HTTPS_PROXY",
                "http_proxy", "https_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", moto_server)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    client = boto3.client("s3")
    bucket = "voc-%s" % uuid.uuid4().hex[:12]
    client.create_bucket(Bucket=bucket)
    return client, bucket


@pytest.fixture
def mirror():
    with FaultServer() as server:
        yield server


def serve(server, voc_tars, prefix="voc"):
    for name in TARS:
        server.put("%s/%s" % (prefix, name), voc_tars["data"][name])
    return server.url(prefix)


def run_ranks(target, ranks, first_delay=0.3):
    """Run target(world) for each local rank in its own thread; rank 0 starts last."""
    results, threads = {}, []

    def run(world):
        try:
            results[world.local_rank] = target(world)
        except BaseException as exc:  # collected for the assertions
            results[world.local_rank] = exc

    for local_rank in sorted(range(ranks), reverse=True):
        world = World(rank=local_rank, size=ranks, local_rank=local_rank, local_size=ranks)
        thread = threading.Thread(target=run, args=(world,), name="local-rank-%d" % local_rank)
        thread.start()
        threads.append(thread)
        if local_rank:
            time.sleep(first_delay)
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive()
    return results


# ------------------------------------------------------------------------- pure functions

def test_tar_specs_follow_data_checksums():
    voc = tar_specs("")
    assert [s.name for s in voc] == list(TARS)
    assert voc[0].sha1 == "34ed68851bce2a36e2a223fa52c661d592c66b3c"
    assert voc[2].sha1 == "4e443f8a2eca6b1dac8a6c57641b67dd40621a49"
    assert all(s.sha1 is None for s in tar_specs("none"))
    custom = tar_specs(json.dumps({"mine.tar": "a" * 40}))
    assert custom == (TarSpec("mine.tar", "a" * 40),)
    with pytest.raises(DataError, match="plain file name"):
        tar_specs(json.dumps({"../up.tar": "a" * 40}))


def test_mirror_urls():
    assert mirror_url(OFFICIAL, V07) == "http://host.robots.ox.ac.uk/pascal/VOC/voc2007/" + V07
    assert mirror_url(OFFICIAL, T07) == "http://host.robots.ox.ac.uk/pascal/VOC/voc2007/" + T07
    assert mirror_url(OFFICIAL, V12) == "http://host.robots.ox.ac.uk/pascal/VOC/voc2012/" + V12
    assert mirror_url("https://m.example/data/", V12) == "https://m.example/data/" + V12
    assert parse_s3_uri("s3://bucket/a/b/") == ("bucket", "a/b/")
    assert s3_key("a/b/", V07) == "a/b/" + V07
    assert s3_key("", V07) == V07
    with pytest.raises(ValueError):
        parse_s3_uri("https://bucket/x")


def test_sources_are_tried_channel_then_s3_then_mirrors_in_order():
    sources = plan_sources("s3://b/p", ("https://one.example", OFFICIAL, "http://two.example/x/"),
                           "voc", "/opt/ml/input/data/voc")
    assert [s.kind for s in sources] == ["channel", "s3", "http", "http", "http"]
    assert sources[1].location == "s3://b/p/"
    assert [s.location for s in sources[2:]] == ["https://one.example", OFFICIAL, "http://two.example/x"]
    assert plan_sources("", ()) == []
    with pytest.raises(DataError, match="ftp://x"):
        plan_sources("", ("ftp://x",))


def test_data_key_depends_on_checksums_and_on_sources_only_when_unverified():
    s3 = [SourceSpec("s3", "s3://b/p/", "s3://b/p/")]
    web = [SourceSpec("http", OFFICIAL, "official")]
    verified = tar_specs("")
    assert data_key(verified, s3) == data_key(verified, web)
    assert data_key(verified, s3) != data_key(tar_specs(json.dumps({V07: "b" * 40})), s3)
    assert data_key(tar_specs("none"), s3) != data_key(tar_specs("none"), web)


def test_marker_state():
    ok = {"format": 1, "status": "ok", "key": "k", "launch": "old"}
    failed = {"format": 1, "status": "failed", "key": "k", "launch": "this", "cause": "x"}
    assert marker_state(ok, "k", "this") == "ok"  # a complete directory serves any launch
    assert marker_state(ok, "other", "this") == "pending"
    assert marker_state(failed, "k", "this") == "failed"
    assert marker_state(dict(failed, launch="earlier"), "k", "this") == "pending"
    assert marker_state(None, "k", "this") == "pending"
    assert marker_state({"status": "ok", "key": "k"}, "k", "this") == "pending"  # no format


def test_failure_text_names_every_source_and_fits():
    attempts = [("channel 'voc'", t, "not in the channel") for t in TARS]
    attempts += [("s3://bucket/prefix/", t, "not found (404)") for t in TARS]
    attempts += [("https://mirror.example/voc", V07, "HTTP 500 (gave up after 5 attempts)")]
    attempts += [("https://mirror.example/voc", t, "SHA-1 mismatch " + "x" * 400) for t in (T07, V12)]
    attempts += [("official mirror (host.robots.ox.ac.uk)", t, "timed out (gave up after 5 attempts)")
                 for t in TARS]
    fix = "put the tars somewhere reachable."
    text = failure_text(list(TARS), attempts, fix)
    whole = DataError(text, fix).failure_text()
    assert len(whole) <= 900
    for label in ("channel 'voc'", "s3://bucket/prefix/", "https://mirror.example/voc", "official mirror"):
        assert label in text
    assert "not found (404) [all]" in text
    assert "HTTP 500" in text and "[2007 trainval]" in text
    assert text.index("channel") < text.index("s3://") < text.index("https://") < text.index("official")


@pytest.mark.parametrize("name,kind,link,problem", [
    ("VOCdevkit/VOC2007/JPEGImages/1.jpg", tarfile.REGTYPE, "", None),
    ("./VOCdevkit/", tarfile.DIRTYPE, "", None),
    ("VOCdevkit/a/link", tarfile.SYMTYPE, "../b/file", None),
    ("../evil.txt", tarfile.REGTYPE, "", "'..'"),
    ("VOCdevkit/../../evil.txt", tarfile.REGTYPE, "", "'..'"),
    ("/etc/passwd", tarfile.REGTYPE, "", "absolute"),
    ("VOCdevkit/link", tarfile.SYMTYPE, "/etc", "absolute"),
    ("VOCdevkit/link", tarfile.SYMTYPE, "../../outside", "outside"),
    ("VOCdevkit/hard", tarfile.LNKTYPE, "../outside", "outside"),
    ("VOCdevkit/fifo", tarfile.FIFOTYPE, "", "FIFO"),
    ("VOCdevkit/dev", tarfile.CHRTYPE, "", "device"),
    ("VOCdevkit/link/inside.txt", tarfile.REGTYPE, "", "through the symlink"),
])
def test_member_problem(name, kind, link, problem):
    found = member_problem(name, kind, link, symlinks={"VOCdevkit/link"})
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found


def test_check_voc_tree(tmp_path):
    generate(str(tmp_path), 4, 2, 2, seed=1)
    expected = voc_fetch.expected_content(tar_specs(""))
    summary, problems = check_voc_tree(str(tmp_path), expected)
    assert problems == []
    assert summary["VOC2007"]["JPEGImages"] == 6 and "test" in summary["VOC2007"]["splits"]
    os.remove(str(tmp_path / "VOCdevkit" / "VOC2007" / "ImageSets" / "Main" / "test.txt"))
    shutil.rmtree(str(tmp_path / "VOCdevkit" / "VOC2012" / "Annotations"))
    _, problems = check_voc_tree(str(tmp_path), expected)
    assert "VOC2007/ImageSets/Main/test.txt is missing" in problems
    assert "VOC2012/Annotations is missing or empty" in problems


# ------------------------------------------------------------------------------ sources

def test_extracted_channel_is_used_as_is(tmp_path):
    config, env, work = job(tmp_path)
    channel = tmp_path / "opt_ml" / "input" / "data" / "voc"
    generate(str(channel), 4, 2, 0, seed=2)
    assert acquire_voc(config, env, World(), work, FAST) == str(channel)
    assert not os.path.exists(os.path.join(work, "voc"))


@pytest.mark.parametrize("mode", sorted(MODES))
def test_tars_from_the_channel(tmp_path, voc_tars, caplog, mode):
    config, env, work = job(tmp_path, voc_tars, channel_tars=TARS)
    with caplog.at_level(logging.INFO, logger="frcnn_train"):
        root = acquire_voc(config, env, World(), work, MODES[mode])
    assert root == os.path.join(work, "voc")
    assert_complete(root, voc_tars)
    assert {r["source"] for r in marker(root)["tars"].values()} == {"channel 'voc'"}
    assert "SHA-1 verified" in caplog.text


def test_tars_from_s3(tmp_path, voc_tars, s3, caplog):
    client, bucket = s3
    for name in TARS:
        client.put_object(Bucket=bucket, Key="data/voc/" + name, Body=voc_tars["data"][name])
    config, env, work = job(tmp_path, voc_tars, data_s3_uri="s3://%s/data/voc" % bucket)
    with caplog.at_level(logging.INFO, logger="frcnn_train"):
        root = acquire_voc(config, env, World(), work, FAST)
    assert_complete(root, voc_tars)
    assert {r["source"] for r in marker(root)["tars"].values()} == {"s3://%s/data/voc/" % bucket}
    assert "MB/s" in caplog.text


def test_s3_missing_or_corrupt_object_falls_back_to_the_mirror(tmp_path, voc_tars, s3, mirror, caplog):
    client, bucket = s3
    client.put_object(Bucket=bucket, Key=V07, Body=voc_tars["data"][V07])
    corrupt = bytearray(voc_tars["data"][V12])
    corrupt[len(corrupt) // 2] ^= 0xFF  # inside a member's data: the tar still reads, the SHA-1 differs
    client.put_object(Bucket=bucket, Key=V12, Body=bytes(corrupt))
    # T07 is not in the bucket at all.
    base = serve(mirror, voc_tars)
    config, env, work = job(tmp_path, voc_tars, data_s3_uri="s3://%s/" % bucket, data_mirrors=base)
    with caplog.at_level(logging.INFO, logger="frcnn_train"):
        root = acquire_voc(config, env, World(), work, FAST)
    assert_complete(root, voc_tars)  # the 2012 files are the mirror's, not the corrupt ones
    sources = {name: r["source"] for name, r in marker(root)["tars"].items()}
    assert sources == {V07: "s3://%s/" % bucket, T07: base, V12: base}
    assert mirror.gets("voc/" + V07) == []
    assert "SHA-1 mismatch" in caplog.text and "not found (404)" in caplog.text


def test_dropped_mirror_transfer_resumes_with_a_range_request(tmp_path, voc_tars, mirror, caplog):
    base = serve(mirror, voc_tars)
    mirror.fail("voc/" + V12, drop_after=100_000, times=1)
    config, env, work = job(tmp_path, voc_tars, data_mirrors=base)
    with caplog.at_level(logging.INFO, logger="frcnn_train"):
        root = acquire_voc(config, env, World(), work, FAST)
    assert_complete(root, voc_tars)
    gets = mirror.gets("voc/" + V12)
    dropped = [g for g in gets if g["sent"] == 100_000]
    assert len(dropped) == 1 and dropped[0]["start"] == 0
    resumed = [g for g in gets if g["range"] == "bytes=100000-%d" % (FAST.chunk_size - 1)]
    assert len(resumed) == 1 and resumed[0]["status"] == 206
    assert mirror.bytes_sent("voc/" + V12) == len(voc_tars["data"][V12])  # nothing fetched twice
    assert "resuming bytes 100000-" in caplog.text


def test_a_stalled_transfer_times_out_and_resumes(tmp_path, voc_tars, mirror, caplog):
    base = serve(mirror, voc_tars)
    mirror.fail("voc/" + T07, drop_after=70_000, stall_s=6.0, times=1)
    config, env, work = job(tmp_path, voc_tars, data_mirrors=base)
    started = time.monotonic()
    with caplog.at_level(logging.INFO, logger="frcnn_train"):
        root = acquire_voc(config, env, World(), work, dataclasses.replace(FAST, timeout_s=0.5))
    assert time.monotonic() - started < 5.0  # it did not sit out the 6 s stall
    assert_complete(root, voc_tars)
    assert "timed out" in caplog.text
    assert [g["range"] for g in mirror.gets("voc/" + T07)].count("bytes=70000-%d" % (FAST.chunk_size - 1)) == 1


def test_s3_and_http_bodies_are_received_straight_into_the_chunk_buffers(s3, mirror):
    """The fast path (one copy, socket to chunk buffer) is found under boto3 and urllib; a
    library upgrade that hides it would fall back silently, so this checks it is really taken."""
    import urllib.request

    client, bucket = s3
    client.put_object(Bucket=bucket, Key="k", Body=bytes(range(256)) * 40)
    body = client.get_object(Bucket=bucket, Key="k", Range="bytes=100-5099")["Body"]
    readinto = voc_fetch._direct_readinto(body)
    assert readinto is not None
    buf, got = bytearray(5000), 0
    while got < len(buf):
        n = readinto(memoryview(buf)[got:])
        assert n
        got += n
    assert bytes(buf) == (bytes(range(256)) * 40)[100:5100]
    body.close()
    mirror.put("voc/x", b"y" * 3000)
    with urllib.request.urlopen(mirror.url("voc/x"), timeout=10) as response:
        assert voc_fetch._direct_readinto(response) is not None


def test_a_content_encoded_body_is_read_through_its_decoder():
    class Headers(dict):
        def get(self, key, default=None):
            return super().get(key.lower(), default)

    import http.client

    response = http.client.HTTPResponse.__new__(http.client.HTTPResponse)
    response.headers, response.chunked, response.length, response.fp = Headers({"content-encoding": "gzip"}), False, 10, io.BufferedReader(io.BytesIO(b"x" * 10))
    assert voc_fetch._direct_readinto(response) is None
    response.headers = Headers()
    assert voc_fetch._direct_readinto(response) is not None
    response.chunked = True
    assert voc_fetch._direct_readinto(response) is None


def test_chunk_buffers_are_reused_not_allocated_per_chunk(tmp_path, voc_tars, s3, monkeypatch):
    client, bucket = s3
    for name in TARS:
        client.put_object(Bucket=bucket, Key="voc/" + name, Body=voc_tars["data"][name])
    made = []
    original = voc_fetch._BufferPool.take

    def take(self, want):
        view = original(self, want)
        if all(view.obj is not other for other in made):
            made.append(view.obj)
        return view

    monkeypatch.setattr(voc_fetch._BufferPool, "take", take)
    opts = dataclasses.replace(FAST, chunk_size=32 * 1024)
    config, env, work = job(tmp_path, voc_tars, data_s3_uri="s3://%s/voc" % bucket)
    root = acquire_voc(config, env, World(), work, opts)
    assert_complete(root, voc_tars)
    chunks = sum(-(-len(voc_tars["data"][n]) // opts.chunk_size) for n in TARS)
    # At most the request window (workers + 2), the queue and the two chunks being hashed and
    # extracted exist at once, per tar; the tars go one after the other, each with its own pool.
    per_tar = opts.s3_workers + 2 + opts.queue_chunks + 2
    assert chunks > 3 * per_tar * 2 and len(made) <= 3 * per_tar


def test_ordered_chunks_arrive_in_order_within_the_memory_window():
    data = bytes(range(256)) * 40  # 10240 bytes in chunks of 100: completion order is shuffled
    lock, state = threading.Lock(), {"in_flight": 0, "peak": 0}

    def fetch(start, end, halt):
        with lock:
            state["in_flight"] += 1
            state["peak"] = max(state["peak"], state["in_flight"])
        time.sleep(0.001 * ((start * 7919) % 5))
        with lock:
            state["in_flight"] -= 1
        return data[start:end + 1]

    chunks = list(voc_fetch._ordered_chunks(len(data), 100, fetch, 4, voc_fetch._Cancel(), max_buffer=300))
    assert b"".join(chunks) == data and len(chunks) == 103
    assert 1 <= state["peak"] <= 3  # max_buffer 300 bytes = 3 chunks of 100


def test_a_failing_chunk_stops_the_others():
    started = []

    def fetch(start, end, halt):
        started.append(start)
        if start == 300:
            raise voc_fetch.SourceFailed("HTTP 500 (gave up after 3 attempts)")
        return b"x" * (end - start + 1)

    with pytest.raises(voc_fetch.SourceFailed, match="HTTP 500"):
        for _ in voc_fetch._ordered_chunks(100_000, 100, fetch, 2, voc_fetch._Cancel()):
            pass
    assert max(started) < 300 + 100 * 6  # nothing far beyond the failure was requested


def test_progress_line_reports_bytes_rate_and_eta():
    progress = voc_fetch._Progress(30, tars=3)
    progress.begin(V12, 100 * voc_fetch.MIB, "s3://b/p/")
    progress._last = (time.monotonic() - 2.0, 0)
    progress.counter(V12)(50 * voc_fetch.MIB)
    text, done, total, rate = progress.line()
    assert done == 50 * voc_fetch.MIB and total == 100 * voc_fetch.MIB
    assert 20 < rate / voc_fetch.MIB < 30  # 50 MB in about 2 s
    assert "50.0 MB of 100.0 MB received (50%)" in text and "MB/s" in text and "ETA 2 s" in text
    assert "0 of 3 tars done" in text and V12 + " from s3://b/p/" in text


def test_dropped_transfer_without_range_support_restarts_and_skips(tmp_path, voc_tars):
    with FaultServer(ranges=False) as plain:
        base = serve(plain, voc_tars)
        plain.fail("voc/" + V07, drop_after=50_000, times=1)
        config, env, work = job(tmp_path, voc_tars, data_mirrors=base)
        root = acquire_voc(config, env, World(), work, FAST)
        assert_complete(root, voc_tars)
        assert [g["sent"] for g in plain.gets("voc/" + V07)] == [50_000, len(voc_tars["data"][V07])]


def test_every_source_failing_names_each_source(tmp_path, voc_tars, s3, mirror):
    _, bucket = s3  # an empty bucket
    base = mirror.url("voc")
    for name in TARS:
        mirror.fail("voc/" + name, status=500)
    config, env, work = job(tmp_path, voc_tars, channel_tars=(V07,), data_s3_uri="s3://%s/x/" % bucket,
                            data_mirrors=base)
    with pytest.raises(DataError) as caught:
        acquire_voc(config, env, World(), work, FAST)
    text = caught.value.failure_text()
    assert len(text) <= 900
    assert "could not get %s, %s" % (T07, V12) in text
    assert "channel 'voc': not in the channel [all]" in text
    assert "s3://%s/x/: not found (404) [all]" % bucket in text
    assert "%s: HTTP 500 (gave up after 3 attempts) [all]" % base in text
    assert len(mirror.gets("voc/" + T07)) == FAST.attempts
    state = marker(os.path.join(work, "voc"))
    assert state["status"] == "failed" and "HTTP 500" in state["cause"]


# ------------------------------------------------------------------------- safe extraction

def evil_tar(kind):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        def add(name, data=b"x", **attrs):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            for key, value in attrs.items():
                setattr(info, key, value)
            archive.addfile(info, io.BytesIO(data) if info.isreg() else None)

        add("VOCdevkit/VOC2007/Annotations/1.xml", b"<annotation/>")
        if kind == "dotdot":
            add("VOCdevkit/../../../escaped.txt", b"pwned")
        elif kind == "absolute":
            add("/tmp/frcnn-absolute-escape.txt", b"pwned")
        elif kind == "symlink":
            add("VOCdevkit/outside", type=tarfile.SYMTYPE, linkname="../../../..", size=0)
            add("VOCdevkit/outside/escaped.txt", b"pwned")
        elif kind == "hardlink":
            add("VOCdevkit/hard", type=tarfile.LNKTYPE, linkname="../../../escaped.txt", size=0)
        elif kind == "fifo":
            add("VOCdevkit/fifo", type=tarfile.FIFOTYPE, size=0)
        add("VOCdevkit/VOC2007/JPEGImages/after.jpg", b"after")
    return buffer.getvalue()


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("kind,member", [
    ("dotdot", "VOCdevkit/../../../escaped.txt"),
    ("absolute", "/tmp/frcnn-absolute-escape.txt"),
    ("symlink", "VOCdevkit/outside"),
    ("hardlink", "VOCdevkit/hard"),
    ("fifo", "VOCdevkit/fifo"),
])
def test_unsafe_tar_is_refused_and_nothing_lands_outside(tmp_path, kind, member, mode):
    data = evil_tar(kind)
    channel = tmp_path / "opt_ml" / "input" / "data" / "voc"
    channel.mkdir(parents=True)
    (channel / "evil.tar").write_bytes(data)
    sha1 = voc_fetch.hashlib.sha1(data).hexdigest()  # the checksum matches: refusal is about content
    config, env, work = job(tmp_path, data_checksums=json.dumps({"evil.tar": sha1}))
    before = set(os.listdir(str(tmp_path)))
    with pytest.raises(DataError) as caught:
        acquire_voc(config, env, World(), work, MODES[mode])
    assert repr(member) in str(caught.value) and "refused" in str(caught.value)
    root = os.path.join(work, "voc")
    for place in (tmp_path, tmp_path / "work", root):
        assert not os.path.exists(os.path.join(str(place), "escaped.txt"))
    assert not os.path.exists("/tmp/frcnn-absolute-escape.txt")
    assert set(os.listdir(str(tmp_path))) - before == {"work"}
    assert not os.path.exists(os.path.join(root, "VOCdevkit"))  # nothing of the tar kept
    assert [e for e in os.listdir(root) if e.startswith(voc_fetch.PARTIAL_PREFIX)] == []


# -------------------------------------------------------------------------- once per host

def test_two_ranks_on_a_host_fetch_once(tmp_path, voc_tars, mirror, caplog):
    base = serve(mirror, voc_tars)
    config, env, work = job(tmp_path, voc_tars, data_mirrors=base)
    with caplog.at_level(logging.INFO, logger="frcnn_train"):
        results = run_ranks(lambda world: acquire_voc(config, env, world, work, FAST), 2)
    root = os.path.join(work, "voc")
    assert results == {0: root, 1: root}
    fetchers = {r.threadName for r in caplog.records if r.getMessage().startswith("data: fetching")}
    assert fetchers == {"local-rank-0"}  # rank 1 (started first) only waited for the marker
    assert_complete(root, voc_tars)
    for name in TARS:
        gets = sorted(mirror.gets("voc/" + name), key=lambda g: g["start"])
        assert sum(g["sent"] for g in gets) == len(voc_tars["data"][name])
        assert all(a["end"] < b["start"] for a, b in zip(gets, gets[1:]))  # no byte twice


def test_a_failing_fetcher_fails_the_waiting_rank_clearly(tmp_path, voc_tars, mirror):
    base = mirror.url("voc")
    for name in TARS:
        mirror.fail("voc/" + name, status=503)
    config, env, work = job(tmp_path, voc_tars, data_mirrors=base)
    results = run_ranks(lambda world: acquire_voc(config, env, world, work, FAST), 2)
    assert isinstance(results[0], DataError) and isinstance(results[1], DataError)
    text = results[1].failure_text()
    assert "local rank 0 on this host failed to prepare the data" in text
    assert "HTTP 503" in text and len(text) <= 900


def test_a_waiting_rank_times_out_and_ignores_an_earlier_launch_failure(tmp_path, voc_tars):
    config, env, work = job(tmp_path, voc_tars, data_mirrors="http://127.0.0.1:9/voc")
    specs = tar_specs(config.data_checksums)
    key = data_key(specs, plan_sources(config.data_s3_uri, config.data_mirrors))
    root = os.path.join(work, "voc")
    os.makedirs(root)
    with open(os.path.join(root, voc_fetch.MARKER_NAME), "w") as handle:
        json.dump({"format": 1, "status": "failed", "key": key, "launch": "an-earlier-launch",
                   "cause": "stale failure"}, handle)
    world = World(rank=1, size=2, local_rank=1, local_size=2)
    started = time.monotonic()
    with pytest.raises(DataError, match="timed out after 1 s waiting for local rank 0") as caught:
        acquire_voc(config, env, world, work, FetchOptions(wait_timeout_s=0.6, poll_s=0.05))
    assert "stale failure" not in str(caught.value)
    assert time.monotonic() - started < 10


def test_a_complete_directory_is_reused_without_any_request(tmp_path, voc_tars, mirror, caplog):
    base = serve(mirror, voc_tars)
    config, env, work = job(tmp_path, voc_tars, data_mirrors=base)
    root = acquire_voc(config, env, World(), work, FAST)
    assert len(mirror.requests) >= 3
    mirror.clear()
    with caplog.at_level(logging.INFO, logger="frcnn_train"):
        assert acquire_voc(config, env, World(), work, FAST) == root
        other = World(rank=1, size=2, local_rank=1, local_size=2)
        assert acquire_voc(config, env, other, work, FAST) == root  # no waiting either
    assert mirror.requests == []
    assert "reusing it without fetching" in caplog.text
    # A damaged tree is not taken for complete: it is fetched again.
    shutil.rmtree(os.path.join(root, "VOCdevkit", "VOC2012", "Annotations"))
    assert acquire_voc(config, env, World(), work, FAST) == root
    assert len(mirror.gets("voc/" + V12)) >= 1
    assert_complete(root, voc_tars)


def test_free_disk_is_checked_before_writing(tmp_path, voc_tars, monkeypatch):
    config, env, work = job(tmp_path, voc_tars, channel_tars=TARS)
    monkeypatch.setattr(voc_fetch, "_free_bytes", lambda path: 12345)
    with pytest.raises(DataError) as caught:
        acquire_voc(config, env, World(), work, FAST)
    text = str(caught.value)
    assert "not enough free disk space" in text and "12345 bytes" in text and "needs about" in text
    assert not os.path.exists(os.path.join(work, "voc", "VOCdevkit"))
