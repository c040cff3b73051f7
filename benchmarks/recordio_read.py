"""RecordIO read by offset against loose image files, and the record scan against a bare read.

Built-in algorithm RecordIO (dataset=builtin) is never unpacked to files: training reads each
record by its byte offset with MXNet's MXIndexedRecordIO. This measures, on the same generated
JPEGs (packed as im2rec packs detection data), in alternating rounds:

- samples/s of ``RecordDetection`` (records by offset, in a shuffled order as a sampler draws
  them, each image decoded to the end) over ``LabelledDetection`` reading the same images as
  loose files (goal >= 0.75: decoding from memory first copies the bytes into an NDArray);
- the time of the scan that recognition and the data check run (labels and image sizes from
  headers, without MXNet) over a bare pass of the RecordIO framing reader over the same file.

Usage: .venv/bin/python benchmarks/recordio_read.py [--images 200] [--rounds 5] [--size 800]
"""

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

import builtin_exports as bx  # noqa: E402  (the tests' im2rec-style packer)
from detector_training.data.acquire import pipe_mode  # noqa: E402
from detector_training.data.formats.data_format import LabelledDetection  # noqa: E402
from detector_training.data.readers import builtin_recordio  # noqa: E402


def read_all(dataset, order):
    """Samples per second, each image decoded to the end (MXNet's decode is asynchronous)."""
    start = time.perf_counter()
    for index in order:
        dataset[index][0].wait_to_read()
    return len(order) / (time.perf_counter() - start)


def bare_framing(path):
    start = time.perf_counter()
    with open(path, "rb") as handle:
        for _record in pipe_mode.read_records(handle, path):
            pass
    return time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--size", type=int, default=800, help="image width (height 3/4 of it)")
    args = parser.parse_args(argv)
    work = tempfile.mkdtemp(prefix="bench-recordio-")
    size = (args.size, args.size * 3 // 4)
    items = bx.sample_objects(args.images, size)
    rec = bx.builtin_recordio_split(work, os.path.join(work, "data", "train"), "train", items)
    labelled = builtin_recordio.read_files([rec], os.path.join(work, "data"))
    labels = [bx_label(image) for image in labelled.images]
    records = builtin_recordio.RecordDetection(labelled.images, labels, labelled.classes,
                                               os.path.join(work, "index"))
    files = LabelledDetection([os.path.join(work, "train_images", name + ".jpg")
                               for name, _s, _b in items], labels, labelled.classes)
    order = list(range(args.images))
    random.Random(0).shuffle(order)
    read_ratios, scan_ratios = [], []
    for _ in range(args.rounds):
        record_rate, file_rate = read_all(records, order), read_all(files, order)
        read_ratios.append(record_rate / file_rate)
        bare = bare_framing(rec)
        start = time.perf_counter()
        builtin_recordio.scan_file(rec, "train.rec")
        scan_ratios.append((time.perf_counter() - start) / bare)
    result = {"images": args.images, "image_size": list(size), "rec_mb": round(os.path.getsize(rec) / 1e6, 1),
              "records_over_files": [round(r, 3) for r in read_ratios],
              "records_over_files_median": round(statistics.median(read_ratios), 3),
              "scan_over_framing": [round(r, 1) for r in scan_ratios],
              "scan_over_framing_median": round(statistics.median(scan_ratios), 1)}
    print(json.dumps(result, indent=1))
    return 0 if result["records_over_files_median"] >= 0.75 else 1


def bx_label(image):
    import numpy as np

    return np.asarray([[b.xmin, b.ymin, b.xmax, b.ymax, 0] for b in image.boxes], "float32")


if __name__ == "__main__":
    sys.exit(main())
