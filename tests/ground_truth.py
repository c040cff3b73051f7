"""Ground Truth data for tests: generated images with an output.manifest as a bounding-box
labelling job writes it (sparse class ids, per-line class maps, an adjustment job's attribute, an
image without boxes, a blank line), the job tree around it for File mode, and a writer of
SageMaker's Pipe mode: the manifest's records in RecordIO framing on a real FIFO."""

import io
import json
import os
import random
import struct
import threading

from detector_training.data.generated.synthetic_voc import _background, make_image

ATTRIBUTE = "boxes"
CLASSES = ("circle", "square", "triangle")
CLASS_IDS = {"circle": 0, "square": 5, "triangle": 7}  # sparse, as a labelling job's may be
BUCKET_PREFIX = "s3://labels-bucket/jobs/shapes/"
RECORDIO_MAGIC = 0xCED7230A


def metadata(class_map, kind="groundtruth/object-detection", boxes=1):
    """The attribute's ``-metadata``: one ``objects`` entry (a confidence) per box, as the docs'
    bounding-box output shows (tests/samples/ground_truth/)."""
    return {"objects": [{"confidence": 0.9}] * boxes, "class-map": class_map, "type": kind,
            "human-annotated": "yes", "creation-date": "2026-12-01T10:00:00.000000",
            "job-name": "labeling-job/shapes"}


def label(width, height, boxes):
    """The attribute's value; ``boxes``: (class id, left, top, width, height)."""
    return {"image_size": [{"width": width, "height": height, "depth": 3}],
            "annotations": [{"class_id": c, "left": l, "top": t, "width": w, "height": h}
                            for c, l, t, w, h in boxes]}


# The attribute an adjustment job writes: the name the user gave it (any name), its metadata with
# "adjustment-status" (Ground Truth's adjustment output, docs: "Label verification and adjustment").
ADJUSTMENT_ATTRIBUTE = "shapes-checked"


def line(source_ref, width, height, boxes, attribute=ATTRIBUTE, adjusted=False):
    """One manifest line. ``adjusted``: an adjustment job's attribute (ADJUSTMENT_ATTRIBUTE, its
    metadata's ``adjustment-status`` "adjusted") holds the boxes, and the original attribute has
    them shifted by 3 pixels (what was corrected)."""
    names = {v: k for k, v in CLASS_IDS.items()}
    class_map = {str(c): names[c] for c in sorted({b[0] for b in boxes})}
    record = {"source-ref": source_ref}
    if adjusted:
        moved = [(c, max(0, l - 3), t, w, h) for c, l, t, w, h in boxes]
        record[attribute] = label(width, height, moved)
        record[attribute + "-metadata"] = metadata(class_map, boxes=len(boxes))
        record[ADJUSTMENT_ATTRIBUTE] = label(width, height, boxes)
        record[ADJUSTMENT_ATTRIBUTE + "-metadata"] = dict(
            metadata(class_map, boxes=len(boxes)), **{"adjustment-status": "adjusted",
                                    "job-name": "labeling-job/shapes-checked"})
        return record
    record[attribute] = label(width, height, boxes)
    record[attribute + "-metadata"] = metadata(class_map, boxes=len(boxes))
    return record


def generate(images_dir, count, seed=0, empty=(1,), adjusted=(2,), folder="batch-1"):
    """Write ``count`` JPEGs under ``images_dir/folder`` and return the manifest's records (as
    dicts, in order): line n has no boxes when n is in ``empty``, an adjustment when in
    ``adjusted``. Source-refs point to BUCKET_PREFIX + folder/name."""
    rng = random.Random(seed)
    os.makedirs(os.path.join(images_dir, folder), exist_ok=True)
    records = []
    for n in range(count):
        if n in empty:
            img, objects = _background(rng, 160, 120), []
        else:
            img, objects = make_image(rng, list(CLASSES))
        name = "img-%03d.jpg" % n
        img.save(os.path.join(images_dir, folder, name), quality=90)
        boxes = [(CLASS_IDS[c], x0, y0, x1 - x0 + 1, y1 - y0 + 1) for c, x0, y0, x1, y1 in objects]
        records.append(line(BUCKET_PREFIX + folder + "/" + name, img.width, img.height, boxes,
                            adjusted=n in adjusted))
    return records


def write_manifest(path, records, blank_after=0):
    """JSON Lines as Ground Truth writes them; a blank line after line ``blank_after`` (1-based)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as handle:
        for n, record in enumerate(records, 1):
            handle.write(json.dumps(record) + "\n")
            if n == blank_after:
                handle.write("\n")
    return path


def write_config(base, hyperparameters, channels):
    """hyperparameters.json (strings, as SageMaker sends them) and inputdataconfig.json with
    ``channels`` {name: its config}."""
    config_dir = os.path.join(base, "input", "config")
    os.makedirs(config_dir, exist_ok=True)
    with open(os.path.join(config_dir, "hyperparameters.json"), "w") as handle:
        json.dump({k: str(v) for k, v in hyperparameters.items()}, handle)
    with open(os.path.join(config_dir, "inputdataconfig.json"), "w") as handle:
        json.dump(channels, handle)


FILE_CHANNEL = {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated",
                "RecordWrapperType": "None"}
PIPE_CHANNEL = {"TrainingInputMode": "Pipe", "S3DistributionType": "FullyReplicated",
                "RecordWrapperType": "RecordIO", "ContentType": "application/x-recordio"}


def file_mode_job(base, hyperparameters, count=10, validation=0, seed=0):
    """A File-mode job tree: train (and validation) manifests, images in the 'images' channel."""
    data = os.path.join(base, "input", "data")
    records = generate(os.path.join(data, "images"), count + validation, seed=seed)
    write_manifest(os.path.join(data, "train", "output.manifest"), records[:count], blank_after=3)
    channels = {"train": FILE_CHANNEL, "images": FILE_CHANNEL}
    if validation:
        write_manifest(os.path.join(data, "validation", "output.manifest"), records[count:])
        channels["validation"] = FILE_CHANNEL
    write_config(base, hyperparameters, channels)
    return records


# ------------------------------------------------------------------------------- Pipe mode

def recordio(payload, magic=RECORDIO_MAGIC):
    """One record in SageMaker's RecordIO framing: magic, length (continuation flag 0), payload,
    zero padding to a multiple of 4 bytes."""
    return struct.pack("<II", magic, len(payload)) + payload + b"\0" * (-len(payload) % 4)


def pipe_records(records, images_dir, with_metadata=True, attribute=ATTRIBUTE):
    """The records SageMaker sends for AttributeNames ["source-ref", attribute(, metadata)]: per
    line the image's bytes, then the attribute's JSON (then its metadata's JSON)."""
    payloads = []
    for record in records:
        key = record["source-ref"][len(BUCKET_PREFIX):]
        with open(os.path.join(images_dir, key), "rb") as handle:
            payloads.append(handle.read())
        payloads.append(json.dumps(record[attribute]).encode())
        if with_metadata:
            payloads.append(json.dumps(record[attribute + "-metadata"]).encode())
    return payloads


class FifoWriter:
    """Writes ``data`` into a new FIFO at ``path`` from a thread, as SageMaker's agent does (the
    write blocks until the job opens the FIFO); ``join`` says how many bytes went in."""

    def __init__(self, path, data):
        os.mkfifo(path)
        self.path, self.data, self.written, self.error = path, data, 0, None
        self.thread = threading.Thread(target=self._write, daemon=True)
        self.thread.start()

    def _write(self):
        try:
            with open(self.path, "wb") as fifo:
                for start in range(0, len(self.data), 65536):
                    self.written += fifo.write(self.data[start:start + 65536])
        except OSError as exc:  # the reader went away
            self.error = exc

    def join(self, timeout=60):
        self.thread.join(timeout)
        return self.written


def pipe_mode_job(base, hyperparameters, count=10, seed=0, with_metadata=True, framing=None):
    """A Pipe-mode job tree: the 'train' channel's epoch-0 FIFO fed with ``count`` lines'
    records (``framing``: bytes to send instead, for broken-framing tests). Returns the writer."""
    images = os.path.join(os.path.dirname(os.path.abspath(base)), "s3-images")  # what S3 holds
    records = generate(images, count, seed=seed)
    data = os.path.join(base, "input", "data")
    os.makedirs(data, exist_ok=True)
    write_config(base, hyperparameters, {"train": PIPE_CHANNEL})
    if framing is None:
        framing = b"".join(recordio(p) for p in pipe_records(records, images, with_metadata))
    return FifoWriter(os.path.join(data, "train_0"), framing), records


def jpeg_bytes(seed=0):
    buf = io.BytesIO()
    _background(random.Random(seed), 64, 48).save(buf, "JPEG")
    return buf.getvalue()
