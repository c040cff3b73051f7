"""VOC acquisition: sources in order, verify then extract, overlap across tars, once per host.

Everything talks to 127.0.0.1 only: S3 is moto's server (ThreadedMotoServer) on an ephemeral port,
mirrors are tests/fault_http_server.py. The tars are generated (a few MB) once per module.
"""

import hashlib
import io
import json
import logging
import os
import re
import shutil
import tarfile
import threading
import time
from dataclasses import replace

import pytest

from fault_http_server import FaultServer
from detector_training.core import archive
from detector_training.data.acquire import host_once, sources, voc_fetch
from detector_training.job.config import from_hyperparameters
from detector_training.core.distributed import World
from detector_training.errors import DataError
from detector_training.job.sm_env import Environment, JobPaths
from detector_training.data.generated.synthetic_voc import generate, make_voc_tars
from detector_training.data.acquire.voc_fetch import (OFFICIAL, FetchOptions, SourceSpec, TarSpec, acquire_voc, data_key,
                                   failure_text, fetch_order, mirror_url, plan_sources, tar_specs)

V07, T07, V12 = "VOCtrainval_06-Nov-2007.tar", "VOCtest_06-Nov-2007.tar", "VOCtrainval_11-May-2012.tar"
TARS = (V07, T07, V12)
FAST = FetchOptions(chunk_size=5 << 20, s3_workers=3, attempts=3, backoff_s=0.01, max_backoff_s=0.05,
                    timeout_s=5, wait_timeout_s=30, poll_s=0.05, progress_s=0.5, disk_margin_bytes=1 << 20)


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
    with open(os.path.join(root, host_once.MARKER_NAME)) as handle:
        return json.load(handle)


def assert_complete(root, voc_tars):
    """The tree GluonCV reads, with every member of the tars byte for byte."""
    assert os.path.isdir(os.path.join(root, "VOCdevkit", "VOC2007"))
    assert os.path.isdir(os.path.join(root, "VOCdevkit", "VOC2012"))
    for name in TARS:
        with tarfile.open(fileobj=io.BytesIO(voc_tars["data"][name])) as tar:
            members = [m for m in tar.getmembers() if m.isfile()]
            assert members
            for member in members[:: max(1, len(members) // 12)] + members[-1:]:
                with open(os.path.join(root, member.name), "rb") as handle:
                    assert handle.read() == tar.extractfile(member).read(), member.name
    assert not os.path.exists(os.path.join(root, voc_fetch.STAGING_DIR_NAME))
    state = marker(root)
    assert state["status"] == "ok"
    for name in TARS:
        assert state["tars"][name]["sha1"] == voc_tars["sha1"][name]


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
    unchecked = tar_specs("none")
    assert [s.name for s in unchecked] == list(TARS) and all(s.sha1 is None for s in unchecked)
    custom = tar_specs(json.dumps({"mine.tar": "A" * 40}))
    assert custom == (TarSpec("mine.tar", "a" * 40),)
    with pytest.raises(DataError, match="plain file name"):
        tar_specs(json.dumps({"../up.tar": "a" * 40}))


def test_the_largest_tar_is_fetched_first():
    assert [s.name for s in fetch_order(tar_specs(""))] == [V12, V07, T07]
    custom = tar_specs(json.dumps({"b.tar": "1" * 40, "a.tar": "2" * 40}))
    assert [s.name for s in fetch_order(custom)] == ["b.tar", "a.tar"]


def test_mirror_urls():
    assert mirror_url(OFFICIAL, V07) == "http://host.robots.ox.ac.uk/pascal/VOC/voc2007/" + V07
    assert mirror_url(OFFICIAL, T07) == "http://host.robots.ox.ac.uk/pascal/VOC/voc2007/" + T07
    assert mirror_url(OFFICIAL, V12) == "http://host.robots.ox.ac.uk/pascal/VOC/voc2012/" + V12
    assert mirror_url("https://m.example/data/", V12) == "https://m.example/data/" + V12
    assert sources.parse_s3_uri("s3://bucket/a/b/") == ("bucket", "a/b/")
    with pytest.raises(ValueError):
        sources.parse_s3_uri("https://bucket/x")


def test_sources_are_tried_channel_then_s3_then_mirrors_in_order():
    planned = plan_sources("s3://b/p", ("https://one.example", OFFICIAL, "http://two.example/x/"),
                           "voc", "/opt/ml/input/data/voc")
    assert [s.kind for s in planned] == ["channel", "s3", "http", "http", "http"]
    assert planned[1].location == "s3://b/p/"
    assert [s.location for s in planned[2:]] == ["https://one.example", OFFICIAL, "http://two.example/x"]
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


def test_failure_text_names_every_source_and_fits():
    attempts = [("channel 'voc'", t, "no file " + t) for t in TARS]
    attempts += [("s3://bucket/prefix/", t, "not found") for t in TARS]
    attempts += [("https://mirror.example/voc", V07, "HTTP 500 Internal Server Error (after 5 tries)")]
    attempts += [("https://mirror.example/voc", t, "SHA-1 mismatch " + "x" * 400) for t in (T07, V12)]
    attempts += [("official mirror (host.robots.ox.ac.uk)", t, "timed out (after 5 tries)") for t in TARS]
    fix = "put the tars somewhere reachable."
    text = failure_text(list(TARS), attempts, fix)
    assert len(DataError(text, fix).failure_text()) <= 900
    for label in ("channel 'voc'", "s3://bucket/prefix/", "https://mirror.example/voc", "official mirror"):
        assert label in text
    assert "not found [all]" in text
    assert "HTTP 500" in text and "[2007 trainval]" in text
    assert text.index("channel") < text.index("s3://") < text.index("https://") < text.index("official")


# ------------------------------------------------------------------------------------------ sources

def test_no_source_at_all_is_named(tmp_path):
    config, env, work = job(tmp_path)
    with pytest.raises(DataError, match="no data source: no 'voc' .* channel, no data_s3_uri and no data_mirrors"):
        acquire_voc(config, env, World(), work, FAST)


def test_extracted_channel_is_used_as_is(tmp_path):
    config, env, work = job(tmp_path)
    channel = tmp_path / "opt_ml" / "input" / "data" / "voc"
    generate(str(channel), 4, 2, 0, seed=2)
    assert acquire_voc(config, env, World(), work, FAST) == str(channel)
    assert not os.path.exists(os.path.join(work, "voc"))


def test_tars_from_the_channel(tmp_path, voc_tars, caplog):
    config, env, work = job(tmp_path, voc_tars, channel_tars=TARS)
    with caplog.at_level(logging.INFO, logger="detector_training"):
        root = acquire_voc(config, env, World(), work, FAST)
    assert root == os.path.join(work, "voc")
    assert_complete(root, voc_tars)
    assert {r["source"] for r in marker(root)["tars"].values()} == {"channel 'voc'"}
    assert "SHA-1 verified" in caplog.text
    channel = tmp_path / "opt_ml" / "input" / "data" / "voc"
    assert sorted(os.listdir(channel)) == sorted(TARS)  # the channel is only read


def test_tars_from_s3(tmp_path, voc_tars, s3, caplog):
    client, bucket = s3
    for name in TARS:
        client.put_object(Bucket=bucket, Key="data/voc/" + name, Body=voc_tars["data"][name])
    config, env, work = job(tmp_path, voc_tars, data_s3_uri="s3://%s/data/voc" % bucket)
    with caplog.at_level(logging.INFO, logger="detector_training"):
        root = acquire_voc(config, env, World(), work, FAST)
    assert_complete(root, voc_tars)
    assert {r["source"] for r in marker(root)["tars"].values()} == {"s3://%s/data/voc/" % bucket}
    assert "data: ready" in caplog.text


def test_s3_missing_or_corrupt_object_falls_back_to_the_mirror(tmp_path, voc_tars, s3, mirror, caplog):
    client, bucket = s3
    client.put_object(Bucket=bucket, Key=V07, Body=voc_tars["data"][V07])
    corrupt = bytearray(voc_tars["data"][V12])
    corrupt[len(corrupt) // 2] ^= 0xFF  # inside a member's data: the tar still reads, the SHA-1 differs
    client.put_object(Bucket=bucket, Key=V12, Body=bytes(corrupt))
    # T07 is not in the bucket at all.
    base = serve(mirror, voc_tars)
    config, env, work = job(tmp_path, voc_tars, data_s3_uri="s3://%s/" % bucket, data_mirrors=base)
    with caplog.at_level(logging.INFO, logger="detector_training"):
        root = acquire_voc(config, env, World(), work, FAST)
    assert_complete(root, voc_tars)  # the 2012 files are the mirror's, not the corrupt ones
    assert {name: r["source"] for name, r in marker(root)["tars"].items()} == {
        V07: "s3://%s/" % bucket, T07: base, V12: base}
    assert mirror.gets("voc/" + V07) == []
    assert "SHA-1 mismatch" in caplog.text and "failed: not found" in caplog.text


@pytest.fixture
def extractions(monkeypatch):
    """Every archive handed to the extractor, as (SHA-1 of its bytes, start, end): a spy that runs
    the real extraction."""
    seen = []
    real = archive.extract

    def spy(fileobj, parent, **kwargs):
        position = fileobj.tell()
        digest = hashlib.sha1(fileobj.read()).hexdigest()
        fileobj.seek(position)
        started = time.monotonic()
        try:
            return real(fileobj, parent, **kwargs)
        finally:
            seen.append((digest, started, time.monotonic()))

    monkeypatch.setattr(archive, "extract", spy)
    return seen


def tampered(data, path="VOCdevkit/VOC2007/JPEGImages/tampered.jpg"):
    """The same tar with one more member: a valid archive whose SHA-1 is not the expected one."""
    out = io.BytesIO()
    with tarfile.open(fileobj=io.BytesIO(data)) as src, tarfile.open(fileobj=out, mode="w",
                                                                     format=tarfile.GNU_FORMAT) as dst:
        for member in src.getmembers():
            dst.addfile(member, src.extractfile(member) if member.isfile() else None)
        info = tarfile.TarInfo(path)
        info.size = 7
        dst.addfile(info, io.BytesIO(b"tampers"))
    return out.getvalue()


def test_a_tampered_tar_is_never_extracted_and_the_next_source_serves(tmp_path, voc_tars, s3, mirror,
                                                                      extractions, caplog):
    client, bucket = s3
    bad = tampered(voc_tars["data"][V07])
    client.put_object(Bucket=bucket, Key=V07, Body=bad)
    base = serve(mirror, voc_tars)
    config, env, work = job(tmp_path, voc_tars, data_s3_uri="s3://%s/" % bucket, data_mirrors=base)
    with caplog.at_level(logging.INFO, logger="detector_training"):
        root = acquire_voc(config, env, World(), work, FAST)
    assert_complete(root, voc_tars)
    assert hashlib.sha1(bad).hexdigest() not in [digest for digest, _, _ in extractions]
    assert sorted(digest for digest, _, _ in extractions) == sorted(voc_tars["sha1"].values())
    assert not os.path.exists(os.path.join(root, "VOCdevkit", "VOC2007", "JPEGImages", "tampered.jpg"))
    assert "SHA-1 mismatch" in caplog.text and "not extracted" in caplog.text


def test_one_tar_extracts_while_the_next_downloads_never_before_its_own_download(tmp_path, voc_tars, mirror,
                                                                                   extractions, monkeypatch):
    base = serve(mirror, voc_tars)
    downloads = []
    real_stage = sources.stage_http

    def timed_stage(url, *args, **kwargs):
        started = time.monotonic()
        time.sleep(0.3)  # a slower network than loopback, so the overlap shows
        staged = real_stage(url, *args, **kwargs)
        downloads.append((staged.sha1, started, time.monotonic()))
        return staged

    real_extract = archive.extract

    def slow_extract(*args, **kwargs):
        time.sleep(0.5)
        return real_extract(*args, **kwargs)

    monkeypatch.setattr(sources, "stage_http", timed_stage)
    monkeypatch.setattr(voc_fetch.archive, "extract", slow_extract)
    config, env, work = job(tmp_path, voc_tars, data_mirrors=base)
    assert_complete(acquire_voc(config, env, World(), work, FAST), voc_tars)
    downloaded = {sha: (start, end) for sha, start, end in downloads}
    assert [sha for sha, _, _ in downloads] == [voc_tars["sha1"][n] for n in (V12, V07, T07)]  # largest first
    for sha, start, _ in extractions:
        assert start >= downloaded[sha][1]  # verify, then extract: never within one tar
    for (_, start_a, end_a), (_, start_b, end_b) in zip(downloads, downloads[1:]):
        assert start_b >= end_a  # one download at a time
    first_extract = min(extractions, key=lambda e: e[1])
    assert any(start < first_extract[2] and end > first_extract[1]
               for sha, start, end in downloads if sha != first_extract[0])  # overlap across tars


def test_an_unsafe_tar_moves_on_to_the_next_source(tmp_path, voc_tars, s3, mirror, caplog):
    client, bucket = s3
    evil = tampered(voc_tars["data"][V12], path="VOCdevkit/../../escaped.txt")
    client.put_object(Bucket=bucket, Key=V12, Body=evil)
    base = serve(mirror, voc_tars)
    sums = dict(voc_tars["sha1"], **{V12: hashlib.sha1(evil).hexdigest()})  # the checksum matches the evil tar
    mirror.put("voc/" + V12, evil)
    with FaultServer() as second:
        base2 = serve(second, voc_tars)
        second.put("voc/" + V12, voc_tars["data"][V12])
        config, env, work = job(tmp_path, voc_tars, data_s3_uri="s3://%s/" % bucket,
                                data_mirrors="%s,%s" % (base, base2), data_checksums="none")
        with caplog.at_level(logging.INFO, logger="detector_training"), pytest.raises(DataError) as caught:
            acquire_voc(config, env, World(), work, FAST)  # plain http without checksums: refused
        assert "plain http is used only for tars with a known checksum" in str(caught.value)
        config, env, work = job(tmp_path, voc_tars, data_s3_uri="s3://%s/" % bucket,
                                data_mirrors="%s,%s" % (base, base2), data_checksums=json.dumps(sums))
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="detector_training"), pytest.raises(DataError) as caught:
            acquire_voc(config, env, World(), work, FAST)
    text = caught.value.failure_text()
    assert "refused: member 'VOCdevkit/../../escaped.txt' has a '..' component" in text
    assert "s3://%s/" % bucket in text and base in text and base2 in text
    for place in (tmp_path, tmp_path / "work", tmp_path / "work" / "voc"):
        assert not os.path.exists(os.path.join(str(place), "escaped.txt"))


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
    assert "channel 'voc': no file" in text
    assert "s3://%s/x/: not found [all]" % bucket in text
    assert "%s: HTTP 500 Internal Server Error (after 3 tries) [all]" % base in text
    assert len(mirror.gets("voc/" + T07)) == FAST.attempts
    state = marker(os.path.join(work, "voc"))
    assert state["status"] == "failed" and "HTTP 500" in state["cause"]


def test_a_dripping_mirror_fails_over_to_the_next_one(tmp_path, voc_tars, mirror):
    base = serve(mirror, voc_tars)
    mirror.fail("voc/" + V12, drip_s=0.01)
    with FaultServer() as second:
        base2 = serve(second, voc_tars)
        config, env, work = job(tmp_path, voc_tars, data_mirrors="%s,%s" % (base, base2))
        started = time.monotonic()
        root = acquire_voc(config, env, World(), work, FetchOptions(deadline_s=1.0, backoff_s=0.01, timeout_s=5))
        # The 3 MB drip would take hours: a minute only catches a mirror that was never left.
        assert time.monotonic() - started < 60
        assert_complete(root, voc_tars)
        assert marker(root)["tars"][V12]["source"] == base2


def test_a_gzip_tar_is_checked_against_the_free_disk_by_its_expanded_size(tmp_path, small_disk):
    devkit = tmp_path / "gen"
    generate(str(devkit), 4, 2, 0, seed=4)
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as out:
        out.add(str(devkit / "VOCdevkit"), arcname="VOCdevkit")
        info = tarfile.TarInfo("VOCdevkit/VOC2007/JPEGImages/zeros.jpg")
        info.size = 40 << 20  # 40 MB of zeros: about 40 KB compressed, more than the disk holds
        out.addfile(info, io.BytesIO(bytes(info.size)))
    payload = data.getvalue()
    assert len(payload) < 1 << 20
    channel = tmp_path / "opt_ml" / "input" / "data" / "voc"
    channel.mkdir(parents=True)
    (channel / "data.tar.gz").write_bytes(payload)
    config, env, _ = job(tmp_path, data_checksums=json.dumps({"data.tar.gz": hashlib.sha1(payload).hexdigest()}))
    with pytest.raises(DataError) as caught:
        acquire_voc(config, env, World(), str(small_disk), FAST)
    text = caught.value.cause
    assert "not enough free disk space" in text and "to extract data.tar.gz" in text
    assert re.search(r"it needs about 4[01]\.\d MB and 2\d\.\d MB are free", text), text
    assert not os.path.exists(os.path.join(str(small_disk), "voc", "VOCdevkit"))
    assert shutil.disk_usage(str(small_disk)).used < 1 << 20  # nothing was written first


# ---------------------------------------------------------------------------------- once per host

def test_two_ranks_on_a_host_fetch_once(tmp_path, voc_tars, mirror, caplog):
    base = serve(mirror, voc_tars)
    config, env, work = job(tmp_path, voc_tars, data_mirrors=base)
    with caplog.at_level(logging.INFO, logger="detector_training"):
        results = run_ranks(lambda world: acquire_voc(config, env, world, work, FAST), 2)
    root = os.path.join(work, "voc")
    assert results == {0: root, 1: root}
    fetchers = {r.threadName for r in caplog.records if r.getMessage().startswith("data: fetching")}
    assert fetchers == {"local-rank-0"}  # rank 1 (started first) only waited for the marker
    assert_complete(root, voc_tars)
    for name in TARS:
        assert mirror.bytes_sent("voc/" + name) == len(voc_tars["data"][name])


def test_a_failing_fetcher_fails_the_waiting_rank_clearly(tmp_path, voc_tars, mirror):
    base = mirror.url("voc")
    for name in TARS:
        mirror.fail("voc/" + name, status=503)
    config, env, work = job(tmp_path, voc_tars, data_mirrors=base)
    results = run_ranks(lambda world: acquire_voc(config, env, world, work, FAST), 2)
    assert isinstance(results[0], DataError) and isinstance(results[1], DataError)
    text = results[1].failure_text()
    assert "local rank 0 on this host failed to prepare the data" in text
    assert "HTTP 503" in text and len(text) <= 1000


def test_a_waiting_rank_times_out_and_ignores_an_earlier_launch_failure(tmp_path, voc_tars):
    config, env, work = job(tmp_path, voc_tars, data_mirrors="http://127.0.0.1:9/voc")
    key = data_key(tar_specs(config.data_checksums), plan_sources(config.data_s3_uri, config.data_mirrors))
    root = os.path.join(work, "voc")
    os.makedirs(root)
    host_once.write_marker(root, status="failed", key=key, launch="an-earlier-launch", cause="stale failure")
    world = World(rank=1, size=2, local_rank=1, local_size=2)
    started = time.monotonic()
    with pytest.raises(DataError, match="timed out after 1 s waiting for local rank 0") as caught:
        acquire_voc(config, env, world, work, FetchOptions(wait_timeout_s=0.6, poll_s=0.05))
    assert "stale failure" not in str(caught.value)
    assert time.monotonic() - started < 60  # only catches a wait past its 0.6 s timeout (hours by default)


def test_a_complete_directory_is_reused_without_any_request(tmp_path, voc_tars, mirror, caplog):
    base = serve(mirror, voc_tars)
    config, env, work = job(tmp_path, voc_tars, data_mirrors=base)
    root = acquire_voc(config, env, World(), work, FAST)
    assert len(mirror.requests) >= 3
    mirror.clear()
    with caplog.at_level(logging.INFO, logger="detector_training"):
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


def test_what_an_interrupted_fetch_left_is_cleared_first(tmp_path, voc_tars, mirror, caplog):
    base = serve(mirror, voc_tars)
    config, env, work = job(tmp_path, voc_tars, data_mirrors=base)
    root = os.path.join(work, "voc")
    os.makedirs(os.path.join(root, "VOCdevkit", "VOC2007", "JPEGImages"))
    with open(os.path.join(root, "VOCdevkit", "VOC2007", "JPEGImages", "stale.jpg"), "w") as handle:
        handle.write("half a run ago")
    os.makedirs(os.path.join(root, voc_fetch.STAGING_DIR_NAME))
    with caplog.at_level(logging.INFO, logger="detector_training"):
        assert acquire_voc(config, env, World(), work, FAST) == root
    assert_complete(root, voc_tars)
    assert not os.path.exists(os.path.join(root, "VOCdevkit", "VOC2007", "JPEGImages", "stale.jpg"))
    assert "clearing" in caplog.text


def test_a_working_directory_that_is_not_what_it_seems_is_never_written_through(tmp_path, voc_tars):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("original")
    config, env, work = job(tmp_path, voc_tars, channel_tars=TARS)
    os.makedirs(work)
    os.symlink(str(outside), os.path.join(work, "voc"))  # the data directory
    os.symlink(str(outside / "lock"), os.path.join(work, ".voc.lock"))  # the lock file
    root = acquire_voc(config, env, World(), work, FAST)
    assert_complete(root, voc_tars)
    assert not os.path.islink(root)
    assert os.listdir(outside) == ["victim.txt"] and (outside / "victim.txt").read_text() == "original"


def test_a_mirror_that_sends_no_length_stops_at_the_free_disk_budget(tmp_path, small_disk):
    payload = os.urandom(30 << 20)  # more than the 24 MB disk holds
    with FaultServer(length=False) as plain:
        plain.put("voc/data.tar", payload)
        config, env, _ = job(tmp_path, data_mirrors=plain.url("voc"),
                             data_checksums=json.dumps({"data.tar": hashlib.sha1(payload).hexdigest()}))
        with pytest.raises(DataError) as caught:
            acquire_voc(config, env, World(), str(small_disk), replace(FAST, reserve_step=1 << 20))
    text = caught.value.cause
    assert "not enough free disk space" in text and "to go on downloading (no length announced" in text, text
    assert not os.path.exists(os.path.join(str(small_disk), "voc", voc_fetch.STAGING_DIR_NAME))


@pytest.mark.parametrize("kind", ["gz", "bz2", "xz"])
def test_a_corrupt_compressed_tar_with_a_matching_checksum_is_an_archive_error_of_that_source(tmp_path, kind):
    import bz2
    import lzma

    compress = {"gz": __import__("gzip").compress, "bz2": bz2.compress, "xz": lzma.compress}[kind]
    plain = io.BytesIO()
    with tarfile.open(fileobj=plain, mode="w") as out:
        info = tarfile.TarInfo("VOCdevkit/VOC2007/JPEGImages/1.jpg")
        info.size = 50000
        out.addfile(info, io.BytesIO(os.urandom(info.size)))
    packed = bytearray(compress(plain.getvalue()))
    packed[len(packed) // 2] ^= 0x55  # the checksum is of these bytes: only the stream itself can tell
    name = "data.tar." + kind
    channel = tmp_path / "opt_ml" / "input" / "data" / "voc"
    channel.mkdir(parents=True)
    (channel / name).write_bytes(bytes(packed))
    config, env, work = job(tmp_path, data_checksums=json.dumps({name: hashlib.sha1(bytes(packed)).hexdigest()}))
    with pytest.raises(DataError) as caught:
        acquire_voc(config, env, World(), work, FAST)
    assert "channel 'voc': not a readable tar archive" in caught.value.cause
    assert not os.path.exists(os.path.join(work, "voc", "VOCdevkit"))
