"""Pipe mode: SageMaker's RecordIO records read from a real FIFO, framing errors naming the
record, the channel drained once per host into a copy that appears only when complete."""

import io
import json
import os
import struct
from types import SimpleNamespace

import pytest

import ground_truth as gt
from detector_training.data.acquire import host_once, pipe_mode
from detector_training.data.formats import build_datasets
from detector_training.errors import DataError
from detector_training.job.config import from_hyperparameters


def records_of(data):
    return list(pipe_mode.read_records(io.BytesIO(data), "train"))


def test_records_round_trip_with_padding_and_split_parts():
    framed = gt.recordio(b"abcde") + gt.recordio(b"") + gt.recordio(b"wxyz")
    assert records_of(framed) == [(1, b"abcde"), (2, b""), (3, b"wxyz")]
    # dmlc splits a payload where it holds the magic number; the reader joins the parts with it.
    magic = struct.pack("<I", gt.RECORDIO_MAGIC)
    split = (struct.pack("<II", gt.RECORDIO_MAGIC, (1 << 29) | 3) + b"abc\0"
             + struct.pack("<II", gt.RECORDIO_MAGIC, (3 << 29) | 2) + b"de\0\0")
    assert records_of(split + gt.recordio(b"next")) == [(1, b"abc" + magic + b"de"), (2, b"next")]


@pytest.mark.parametrize("data, message", [
    (gt.recordio(b"ok") + gt.recordio(b"image", magic=0x12345678),
     r"channel 'train' record 2 has the wrong magic number 0x12345678"),
    (gt.recordio(b"ok") + gt.recordio(b"image-bytes")[:14], r"record 2 is truncated: its payload has 6 of 11"),
    (gt.recordio(b"ok") + gt.recordio(b"abc")[:-1], r"record 2 is truncated: its padding"),
    (gt.recordio(b"ok") + b"\x0a\x23", r"record 2 is truncated: its header has 2 of 8"),
    (struct.pack("<II", gt.RECORDIO_MAGIC, (1 << 29) | 4) + b"abcd", r"record 1 is truncated: its last part"),
    (struct.pack("<II", gt.RECORDIO_MAGIC, (2 << 29) | 4) + b"abcd", r"record 1 has the continuation flag 2 without"),
])
def test_broken_framing_names_the_record(data, message):
    with pytest.raises(DataError, match=message) as caught:
        records_of(data)
    assert "RecordWrapperType=RecordIO" in str(caught.value)


def lines_of(payloads):
    framed = b"".join(gt.recordio(p) for p in payloads)
    return list(pipe_mode.group_lines(pipe_mode.read_records(io.BytesIO(framed), "train"), "train"))


def test_lines_group_with_and_without_metadata():
    label = json.dumps(gt.label(64, 48, [(5, 1, 2, 10, 10)])).encode()
    meta = json.dumps(gt.metadata({"5": "square"})).encode()
    image = gt.jpeg_bytes()
    with_meta = lines_of([image, label, meta, image, label, meta])
    assert [(n, m["class-map"]) for n, _, _, m in with_meta] == [(1, {"5": "square"}), (4, {"5": "square"})]
    without = lines_of([image, label, image, label])
    assert [(n, m) for n, _, _, m in without] == [(1, None), (3, None)]


@pytest.mark.parametrize("payloads, message", [
    (lambda i, l: [i, l, i, b"{not json"], r"channel 'train' record 4 \(the label\) is not valid JSON"),
    (lambda i, l: [i, l, i, b"[1, 2]"], r"channel 'train' record 4: the label is list"),
    (lambda i, l: [i, l, l], r"channel 'train' record 3 is JSON where an image's bytes"),
    (lambda i, l: [i, l, i], r"channel 'train' ends after record 3, an image without its label"),
    (lambda i, l: [i, json.dumps(gt.label(64, 48, [(5, 60, 2, 10, 10)])).encode()],
     r"channel 'train' record 2: annotation 1 .* outside the 64x48 image"),
])
def test_a_label_that_is_not_the_expected_json_names_its_record(payloads, message):
    label = json.dumps(gt.label(64, 48, [(5, 1, 2, 10, 10)])).encode()
    with pytest.raises(DataError, match=message):
        lines_of(payloads(gt.jpeg_bytes(), label))


def world(local_rank=0):
    return SimpleNamespace(is_local_main=local_rank == 0, local_rank=local_rank)


def pipe_env(base, environ=None):
    from detector_training.job.sm_env import Environment

    return Environment.read(base, environ=dict(environ or {}, DETECTOR_LAUNCH_ID="test-launch",
                                               DETECTOR_WORK_DIR=os.path.join(base, "work")))


def test_a_fifo_is_drained_into_a_manifest_the_file_reader_reads(tmp_path):
    base = str(tmp_path / "ml")
    writer, records = gt.pipe_mode_job(base, {}, count=5)
    env = pipe_env(base)
    config = from_hyperparameters({"dataset": "manifest", "skip_empty": "false"})
    root = pipe_mode.manifest_root(config, env, world(), 60)
    assert writer.join() == len(writer.data)
    assert root == os.path.join(base, "work", "manifest")
    assert host_once.read_marker(root)["lines"] == {"train": 5}
    datasets = build_datasets(config, root)
    assert datasets.classes == ("circle", "square", "triangle")
    assert len(datasets.train) + len(datasets.val) == 5
    drained = [json.loads(l) for l in open(os.path.join(root, "train", "train.manifest"))]
    assert drained[1]["source-ref"] == "train/record-000004"  # line 2's image is record 4
    assert drained[1]["label"] == records[1]["boxes"]
    with open(os.path.join(root, "images", "train", "record-000004"), "rb") as handle:
        key = records[1]["source-ref"][len(gt.BUCKET_PREFIX):]
        assert handle.read() == open(os.path.join(str(tmp_path), "s3-images", key), "rb").read()
    # The other ranks of the host wait for the marker of this launch, then read the same copy.
    assert pipe_mode.manifest_root(config, env, world(1), 5, poll_s=0.05) == root


def test_without_metadata_the_classes_hyperparameter_names_them(tmp_path):
    base = str(tmp_path / "ml")
    writer, _ = gt.pipe_mode_job(base, {}, count=4, with_metadata=False)
    names = ",".join("c%d" % i for i in range(8))
    config = from_hyperparameters({"dataset": "manifest", "classes": names})
    root = pipe_mode.manifest_root(config, pipe_env(base), world(), 60)
    writer.join()
    assert build_datasets(config, root).classes == tuple(names.split(","))


def test_a_broken_channel_leaves_no_copy_and_tells_the_waiting_ranks(tmp_path):
    base = str(tmp_path / "ml")
    label = json.dumps(gt.label(64, 48, [(5, 1, 2, 10, 10)])).encode()
    framing = gt.recordio(gt.jpeg_bytes()) + gt.recordio(label) + gt.recordio(b"x")[:-3]
    writer, _ = gt.pipe_mode_job(base, {}, framing=framing)
    env = pipe_env(base)
    config = from_hyperparameters({"dataset": "manifest"})
    with pytest.raises(DataError, match="record 3 is truncated"):
        pipe_mode.manifest_root(config, env, world(), 60)
    writer.join()
    work = os.path.join(base, "work")
    assert sorted(os.listdir(work)) == [".manifest.lock", "manifest"]  # no staging folder left
    assert os.listdir(os.path.join(work, "manifest")) == [host_once.MARKER_NAME]  # only the marker
    with pytest.raises(DataError, match="local rank 0 on this host failed .* record 3 is truncated"):
        pipe_mode.manifest_root(config, env, world(1), 5, poll_s=0.05)


def test_pipe_channels_are_found_by_config_or_by_their_fifo(tmp_path):
    os.mkfifo(str(tmp_path / "validation_0"))
    found = pipe_mode.pipe_channels(str(tmp_path), {"train": gt.PIPE_CHANNEL, "images": gt.FILE_CHANNEL})
    assert found == {"train": str(tmp_path / "train_0"), "validation": str(tmp_path / "validation_0")}
    assert pipe_mode.pipe_channels(str(tmp_path / "none"), {"train": gt.FILE_CHANNEL}) == {}


def test_a_manifest_sharded_across_hosts_is_refused():
    sharded = dict(gt.PIPE_CHANNEL, S3DistributionType="ShardedByS3Key")
    pipe_mode.check_replicated({"train": sharded}, ["algo-1"])  # one host sees it all
    pipe_mode.check_replicated({"train": gt.PIPE_CHANNEL}, ["algo-1", "algo-2"])
    with pytest.raises(DataError, match=r"channel\(s\) images, train are ShardedByS3Key across 2 hosts"):
        pipe_mode.check_replicated({"train": sharded, "images": sharded}, ["algo-1", "algo-2"])
