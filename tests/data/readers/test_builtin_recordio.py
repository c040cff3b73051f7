"""The built-in algorithm's RecordIO as im2rec packs it (A=2 and A=4 headers): read without MXNet
for the labels, by offset with MXNet's reader for training, from a real FIFO in Pipe mode; broken
records named by file and number."""

import os
import struct
import threading
from types import SimpleNamespace

import numpy as np
import pytest

import builtin_exports as bx
from detector_training.data import labelled
from detector_training.data.acquire import host_once
from detector_training.data.readers import builtin_recordio as rio
from detector_training.errors import DataError


@pytest.mark.parametrize("header_width", [2, 4])
def test_im2rec_records_read_with_boxes_in_pixels(tmp_path, header_width):
    channels = str(tmp_path / "data")
    bx.builtin_recordio_channels(channels, str(tmp_path / "work"), n_train=4, n_val=2,
                                 header_width=header_width, size=(64, 48))
    assert rio.recognise(channels) == {"train": "1 .rec file(s)", "validation": "1 .rec file(s)"}
    sets = rio.read_splits(channels)
    train = sets["train"]
    assert train.classes == ("0", "1")
    assert len(train.images) == 4 and len(sets["validation"].images) == 2
    first = train.images[0]
    assert first.path == os.path.join(channels, "train", "train.rec") and first.offset == 0
    assert first.size == (64, 48) and first.where == "train/train.rec record 1"
    [box] = first.boxes
    assert (box.label, box.xmin, box.ymin) == ("0", 16, 12)
    assert box.xmax == pytest.approx(33) and box.ymax == pytest.approx(25)
    assert [len(i.boxes) for i in train.images] == [1, 1, 2, 1]
    offsets = [i.offset for i in train.images]
    assert offsets == sorted(offsets) and len(set(offsets)) == 4
    assert not train.drops


def test_the_classes_hyperparameter_names_the_ids(tmp_path):
    channels = str(tmp_path / "data")
    bx.builtin_recordio_channels(channels, str(tmp_path / "work"), n_train=3, n_val=0)
    train = rio.read_splits(channels, id_names=("dog", "cat", "bird"))["train"]
    assert train.classes == ("dog", "cat", "bird")
    assert train.object_counts() == {"dog": 2, "cat": 2, "bird": 0}
    with pytest.raises(DataError, match=r"class 1, beyond the 1 classes named by 'classes' \(dog\)"):
        rio.read_splits(channels, id_names=("dog",))


def test_training_reads_each_record_by_offset_with_mxnet(tmp_path):
    channels = str(tmp_path / "data")
    bx.builtin_recordio_channels(channels, str(tmp_path / "work"), n_train=5, n_val=0)
    train = rio.read_splits(channels)["train"]
    # every other image: the reader seeks, it does not read in order
    images = train.images[::-2]
    labels = [np.asarray([[b.xmin, b.ymin, b.xmax, b.ymax, 0] for b in i.boxes], "float32")
              for i in images]
    dataset = rio.RecordDetection(images, labels, train.classes, str(tmp_path / "index"))
    assert len(dataset) == 3 and dataset.classes == ("0", "1")
    for position, image in enumerate(images):
        decoded, label = dataset[position]
        assert decoded.shape == (48, 64, 3)
        np.testing.assert_array_equal(label, labels[position])
        source = os.path.join(str(tmp_path / "work"), "train_images",
                              "img_%03d.jpg" % train.images.index(image))
        import mxnet as mx

        np.testing.assert_array_equal(decoded.asnumpy(), mx.image.imread(source, 1).asnumpy())
    [index_file] = os.listdir(str(tmp_path / "index"))
    assert open(os.path.join(str(tmp_path / "index"), index_file)).read().splitlines() == [
        "%d\t%d" % (key, image.offset) for key, image in enumerate(images)]
    assert not any(name.endswith(".jpg") for _t, _d, names in os.walk(str(tmp_path / "index"))
                   for name in names)  # nothing unpacked to loose files


def test_a_forked_worker_opens_its_own_reader(tmp_path):
    channels = str(tmp_path / "data")
    bx.builtin_recordio_channels(channels, str(tmp_path / "work"), n_train=4, n_val=0)
    train = rio.read_splits(channels)["train"]
    labels = [np.zeros((1, 5), "float32") for _ in train.images]
    dataset = rio.RecordDetection(train.images, labels, train.classes, str(tmp_path / "index"))
    dataset[0]
    import mxnet as mx

    loader = mx.gluon.data.DataLoader(dataset, batch_size=2, num_workers=2)
    shapes = [batch[0].shape for batch in loader]
    assert shapes == [(2, 48, 64, 3), (2, 48, 64, 3)]


def records_with(labels, tmp_path, image=None):
    """A .rec of records with these raw labels (a scalar for a classification record)."""
    import mxnet as mx

    image = image if image is not None else bx.image_bytes()
    path = str(tmp_path / "data" / "train" / "bad.rec")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    writer = mx.recordio.MXRecordIO(path, "w")
    for number, label in enumerate(labels):
        writer.write(mx.recordio.pack(mx.recordio.IRHeader(0, label, number, 0), image))
    writer.close()
    return str(tmp_path / "data")


@pytest.mark.parametrize("label, message", [
    (3.0, r"train/bad.rec record 2 has the single label 3, not a detection label"),
    ([1.0, 5.0, 0, 0.1, 0.1, 0.5, 0.5], r"record 2: the label's header width A is 1"),
    ([2.0, 4.0, 0, 0.1, 0.1, 0.5], r"record 2: the label's object width B is 4"),
    ([2.0, 5.0, 0, 0.1, 0.1, 0.5], r"record 2: the label has 4 numbers after its 2-number header"),
    ([2.0, 5.0, 0, 10, 12, 30, 40], r"record 2: object 1 has the corners 10, 12, 30, 40: pixels"),
    ([2.0, 5.0, 0.5, 0.1, 0.1, 0.5, 0.5], r"record 2: object 1 has the class 0.5"),
])
def test_a_record_that_is_not_detection_data_is_named(tmp_path, label, message):
    good = [2.0, 5.0, 0, 0.1, 0.1, 0.5, 0.5]
    channels = records_with([good, label], tmp_path)
    with pytest.raises(DataError, match=message) as caught:
        rio.read_splits(channels)
    assert "im2rec --pack-label" in caught.value.fix


def test_a_truncated_file_is_named_by_record(tmp_path):
    channels = records_with([[2.0, 5.0, 0, 0.1, 0.1, 0.5, 0.5]] * 3, tmp_path)
    path = os.path.join(channels, "train", "bad.rec")
    data = open(path, "rb").read()
    open(path, "wb").write(data[:-20])
    with pytest.raises(DataError, match=r"channel 'train/bad.rec' record 3 is truncated"):
        rio.read_splits(channels)


def write_records(channels, labels, images):
    import mxnet as mx

    path = os.path.join(channels, "train", "train.rec")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    writer = mx.recordio.MXRecordIO(path, "w")
    for number, (label, image) in enumerate(zip(labels, images)):
        writer.write(mx.recordio.pack(mx.recordio.IRHeader(0, label, number, 0), image))
    writer.close()
    return channels


def test_quirks_padding_clipped_no_area(tmp_path):
    channels = write_records(str(tmp_path / "data"), [
        [2.0, 5.0, 0, -0.1, 0.1, 0.5, 0.5, 1, 0.2, 0.2, 0.2, 0.6, -1, -1, -1, -1, -1]],
        [bx.image_bytes((64, 48))])
    train = rio.read_splits(channels)["train"]
    [image] = train.images
    assert [(b.label, b.xmin, b.xmax) for b in image.boxes] == [("0", 0.0, pytest.approx(32))]
    assert train.drops.counts() == {labelled.NO_AREA: 1}
    assert train.adjusted.counts() == {labelled.CLIPPED: 1}
    assert train.drops.examples(labelled.NO_AREA) == ["train/train.rec record 1 object 2"]


def test_a_record_whose_image_cannot_be_read_is_named(tmp_path):
    label = [2.0, 5.0, 1, 0.1, 0.1, 0.5, 0.5]
    channels = write_records(str(tmp_path / "data"), [label, label],
                             [bx.image_bytes((64, 48)), b"not an image"])
    with pytest.raises(DataError, match=r"image train/train.rec record 2 cannot be read"):
        rio.read_splits(channels)


def test_no_rec_file_in_train_is_a_clear_error(tmp_path):
    os.makedirs(tmp_path / "train")
    with pytest.raises(DataError, match=r"no RecordIO \(.rec\) file in the 'train' channel"):
        rio.read_splits(str(tmp_path))


# ------------------------------------------------------------------------------------ Pipe mode

PIPE_CONFIG = {"train": {"TrainingInputMode": "Pipe", "ContentType": "application/x-recordio",
                         "RecordWrapperType": "None", "S3DistributionType": "FullyReplicated"}}


def test_pipe_mode_is_recognised_apart_from_an_augmented_manifest(tmp_path):
    assert rio.recognise(str(tmp_path), PIPE_CONFIG) == {"train": "Pipe mode FIFO train_0"}
    manifest = {"train": dict(PIPE_CONFIG["train"], RecordWrapperType="RecordIO")}
    assert rio.recognise(str(tmp_path), manifest) == {}
    images = {"train": dict(PIPE_CONFIG["train"], ContentType="image/jpeg")}
    assert rio.recognise(str(tmp_path), images) == {}
    files = {"train": dict(PIPE_CONFIG["train"], TrainingInputMode="File")}
    assert rio.recognise(str(tmp_path), files) == {}


def serve_fifo(path, data):
    """SageMaker's side of a Pipe-mode channel: the channel's objects' bytes, once, into a FIFO."""
    os.mkfifo(path)

    def write():
        with open(path, "wb") as handle:
            handle.write(data)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return thread


def test_pipe_mode_drains_the_fifo_once_per_host_and_reads_it_as_files(tmp_path):
    source = str(tmp_path / "source")
    rec = bx.builtin_recordio_split(str(tmp_path / "work"), source, "train", bx.sample_objects(4))
    channels = str(tmp_path / "input" / "data")
    os.makedirs(channels)
    writer = serve_fifo(os.path.join(channels, "train_0"), open(rec, "rb").read())
    fifos = rio.pipe_fifos(channels, PIPE_CONFIG)
    assert fifos == {"train": os.path.join(channels, "train_0")}
    work = str(tmp_path / "job")
    launch = "test-launch"
    waiting = {}

    def other_rank():
        world = SimpleNamespace(is_local_main=False)
        waiting["root"] = rio.drain_pipes(fifos, work, world, launch, wait_timeout_s=60, poll_s=0.05)

    waiter = threading.Thread(target=other_rank)
    waiter.start()
    root = rio.drain_pipes(fifos, work, SimpleNamespace(is_local_main=True), launch, 60)
    waiter.join(60)
    writer.join(5)
    assert root == waiting["root"] == os.path.join(work, "recordio")
    copy = os.path.join(root, "train", "train.rec")
    assert open(copy, "rb").read() == open(rec, "rb").read()
    assert host_once.read_marker(root)["status"] == "ok"
    sets = rio.read_splits(root)
    assert len(sets["train"].images) == 4 and sorted(sets) == ["train"]
    assert sets["train"].images[0].where == "train/train.rec record 1"


def test_pipe_mode_with_broken_framing_names_the_record(tmp_path):
    channels = str(tmp_path / "input" / "data")
    os.makedirs(channels)
    framed = struct.pack("<II", 0xCED7230A, 4) + b"abcd" + struct.pack("<II", 0x12345678, 4) + b"abcd"
    writer = serve_fifo(os.path.join(channels, "train_0"), framed)
    root = rio.drain_pipes(rio.pipe_fifos(channels, PIPE_CONFIG), str(tmp_path / "job"),
                           SimpleNamespace(is_local_main=True), "launch", 60)
    writer.join(5)
    with pytest.raises(DataError, match=r"train/train.rec record 1 is 4 bytes, shorter than an "
                                        r"image record"):
        rio.read_splits(root)


def test_without_an_index_folder_the_dataset_keeps_a_private_one_and_removes_it(tmp_path):
    import gc

    channels = str(tmp_path / "data")
    bx.builtin_recordio_channels(channels, str(tmp_path / "work"), n_train=2, n_val=0)
    train = rio.read_splits(channels)["train"]
    dataset = rio.RecordDetection(train.images, [np.zeros((1, 5), "float32")] * 2, train.classes)
    [index_dir] = {os.path.dirname(p) for p in dataset._indexes.values()}
    assert dataset[1][0].shape == (48, 64, 3) and os.path.isdir(index_dir)
    del dataset
    gc.collect()
    assert not os.path.exists(index_dir)
