"""The SageMaker built-in Object Detection algorithm's RecordIO: ``.rec`` files as im2rec packs
detection data, in the ``train`` and ``validation`` channels (File mode), or streamed through the
channel's FIFO (Pipe mode, ``application/x-recordio``).

im2rec (``--pack-label``) turns each ``.lst`` line ``index <TAB> label... <TAB> path`` into one
record: MXNet's image-record header (``uint32 flag, float32 label, uint64 id, uint64 id2``; ``flag``
counts the float32 label numbers that follow), the label, then the image file's bytes. A detection
label is ``[A, B, extra..., class, xmin, ymin, xmax, ymax, (more per object)...]``: A the header
width (>= 2, counting A and B), B the numbers per object (>= 5), corners as fractions of the image
size. Objects of class -1 are padding (the built-in algorithm pads labels to ``label_width``).

Recognition and the data check read the files without MXNet, through the RecordIO framing reader
of :mod:`data.acquire.pipe_mode`, keeping each record's byte offset; image sizes come from the image
bytes' header (Pillow's lazy open). Training reads records by those offsets with MXNet's own
``mx.recordio.MXIndexedRecordIO`` (an index file written once per host under the work directory)
and ``mx.recordio.unpack``: nothing is unpacked to loose files. In Pipe mode, local rank 0 of each
host copies the FIFO's bytes to a ``.rec`` file under the work directory once (under
:mod:`host_once`'s lock and marker), and every rank reads that copy as in File mode.

Class names: the records carry class ids only; the ``classes`` hyperparameter names them in id
order, else the ids are the names ("0", "1", ...). Quirks as the other readers
(:func:`labelled.clean`, once the fractions are pixels): a box partly outside its image is
clipped, one with no area dropped, each counted. A record that is not
detection data (a scalar label, A < 2, B < 5, a length that is not A plus whole objects, pixel
coordinates, image bytes whose header cannot be read) is a DataError naming the file and the
record number.
"""

import hashlib
import io
import logging
import os
import shutil
import struct
import tempfile
import weakref
from dataclasses import dataclass

from detector_training.data.acquire import host_once, pipe_mode
from detector_training.data.labelled import (Box, Drops, LabelledDetection, LabelledImage,
                                              LabelledSet, clean)
from detector_training.data.readers.images import Frame, decode_nd, read_header
from detector_training.errors import DataError

LOG = logging.getLogger("detector_training")

TRAIN, VALIDATION = "train", "validation"
SUFFIX = ".rec"
CONTENT_TYPE = "application/x-recordio"
IR_HEADER = struct.Struct("<IfQQ")  # MXNet's IRHeader: flag, label, id, id2
PIXEL_LIMIT = 1.5  # a corner this far beyond 1.0 is a pixel coordinate, not a fraction
DATA_DIR_NAME = "recordio"  # <work_dir>/recordio/{<channel>.rec, index/}
LAYOUT = "SageMaker built-in Object Detection, RecordIO (im2rec detection records)"
FIX = ("pack the images with im2rec --pack-label from a .lst whose label is [A, B, extra..., "
       "class, xmin, ymin, xmax, ymax, ...] (A >= 2 numbers of header, B >= 5 per object, "
       "corners as fractions of the image size).")


@dataclass
class RecordImage(LabelledImage):
    """A labelled image stored as one record: ``path`` is its ``.rec`` file, ``offset`` the byte
    offset of its record there."""

    offset: int = 0

    def key(self):
        return (super().key(), self.offset)  # every record of a file shares its path


def rec_files(folder):
    """Every ``.rec`` file under ``folder`` (any depth), sorted."""
    if not os.path.isdir(folder):
        return []
    return sorted(os.path.join(top, name) for top, _dirs, names in os.walk(folder)
                  for name in names if name.lower().endswith(SUFFIX))


def is_pipe_channel(config):
    """Whether a channel (its ``inputdataconfig.json`` entry) streams RecordIO files through its
    FIFO: Pipe mode without a record wrapper (a wrapped channel is an augmented manifest), with
    the RecordIO content type or none."""
    return (config.get("TrainingInputMode") == "Pipe"
            and config.get("RecordWrapperType") in (None, "", "None")
            and config.get("ContentType") in (None, "", CONTENT_TYPE))


def recognise(channels_dir, input_data_config=None):
    """{split: what was found} for each split channel holding ``.rec`` files or streaming them
    in Pipe mode; empty when there is none."""
    found = {}
    for split in (TRAIN, VALIDATION):
        files = rec_files(os.path.join(channels_dir, split))
        if files:
            found[split] = "%d .rec file(s)" % len(files)
        elif is_pipe_channel((input_data_config or {}).get(split) or {}):
            found[split] = "Pipe mode FIFO %s_0" % split
    return found


# ------------------------------------------------------------------------------------ one record

def parse_record(payload, where):
    """(label numbers, image bytes) of one record's payload (MXNet's ``recordio.unpack``, read
    without MXNet)."""
    if len(payload) < IR_HEADER.size:
        raise DataError("%s is %d bytes, shorter than an image record's %d-byte header."
                        % (where, len(payload), IR_HEADER.size), FIX)
    flag, scalar, _id, _id2 = IR_HEADER.unpack_from(payload)
    if flag == 0:
        raise DataError("%s has the single label %g, not a detection label (a classification "
                        "record?)." % (where, scalar), FIX)
    end = IR_HEADER.size + 4 * flag
    if end > len(payload):
        raise DataError("%s declares %d label numbers but holds %d bytes." % (where, flag, len(payload)),
                        FIX)
    label = struct.unpack_from("<%df" % flag, payload, IR_HEADER.size)
    return label, payload[end:]


def parse_objects(label, where):
    """[(class id, xmin, ymin, xmax, ymax)] in fractions from a detection label; padding
    objects (class < 0) left out."""
    if len(label) < 2:
        raise DataError("%s: the label has %d number(s), fewer than its header [A, B]." % (
            where, len(label)), FIX)
    header_width, object_width = label[0], label[1]
    if header_width != int(header_width) or not 2 <= header_width <= len(label):
        raise DataError("%s: the label's header width A is %g; it must be a whole number from 2 "
                        "to the label's length %d." % (where, header_width, len(label)), FIX)
    if object_width != int(object_width) or object_width < 5:
        raise DataError("%s: the label's object width B is %g; it must be a whole number >= 5 "
                        "(class, xmin, ymin, xmax, ymax)." % (where, object_width), FIX)
    header_width, object_width = int(header_width), int(object_width)
    body = label[header_width:]
    if len(body) % object_width:
        raise DataError("%s: the label has %d numbers after its %d-number header, not a whole "
                        "number of %d-number objects." % (where, len(body), header_width,
                                                         object_width), FIX)
    objects = []
    for start in range(0, len(body), object_width):
        class_id, xmin, ymin, xmax, ymax = body[start:start + 5]
        if class_id < 0:
            continue
        if class_id != int(class_id):
            raise DataError("%s: object %d has the class %g, not a whole number." % (
                where, start // object_width + 1, class_id), FIX)
        if max(xmin, ymin, xmax, ymax) > PIXEL_LIMIT:
            raise DataError("%s: object %d has the corners %g, %g, %g, %g: pixels, where im2rec's "
                            "detection labels hold fractions of the image size." % (
                                where, start // object_width + 1, xmin, ymin, xmax, ymax), FIX)
        objects.append((int(class_id), xmin, ymin, xmax, ymax))
    return objects


def scan_file(path, label):
    """[(record number, byte offset, objects, image header)] of every record of one ``.rec``
    file, read with the framing reader; ``label`` names the file in errors."""
    records = []
    with open(path, "rb") as handle:
        stream = pipe_mode.CountingReader(handle)
        start = 0
        for number, payload in pipe_mode.read_records(stream, label):
            where = "%s record %d" % (label, number)
            numbers, image = parse_record(payload, where)
            records.append((number, start, parse_objects(numbers, where),
                            read_header(io.BytesIO(image), where)))
            start = stream.count
    return records


# ------------------------------------------------------------------------------------ whole sets

def read_files(paths, label_root, id_names=(), frame=Frame.ORIENTED):
    """The LabelledSet of these ``.rec`` files: boxes in pixels of the ``frame`` (the image bytes
    a record holds are the labelled file's, EXIF tag included, when im2rec packs them as they
    are), class ids named by ``id_names`` (in id order) or by themselves. ``label_root``: what
    file names in messages are relative to."""
    scanned, used = [], set()
    for path in paths:
        label = os.path.relpath(path, label_root)
        records = scan_file(path, label)
        if not records:
            raise DataError("%s holds no records." % label, FIX)
        scanned.append((path, label, records))
        used.update(obj[0] for _n, _o, objects, _s in records for obj in objects)
    if id_names:
        beyond = sorted(class_id for class_id in used if class_id >= len(id_names))
        if beyond:
            raise DataError("the records have class %d, beyond the %d classes named by 'classes' "
                            "(%s)." % (beyond[0], len(id_names), ",".join(id_names)),
                            "name every class, in class id order, with the 'classes' hyperparameter.")
        classes = tuple(id_names)
    else:
        classes = tuple(str(class_id) for class_id in range(max(used) + 1)) if used else ()
    images = []
    for path, label, records in scanned:
        for number, offset, objects, header in records:
            where = "%s record %d" % (label, number)
            oriented = bool(frame.oriented(header))
            width, height = size = header.size(oriented)
            # Corners are fractions of the image here; labelled.clean clips pixels.
            boxes = [Box(xmin * width, ymin * height, xmax * width, ymax * height,
                         classes[class_id], where="%s object %d" % (where, index))
                     for index, (class_id, xmin, ymin, xmax, ymax) in enumerate(objects, 1)]
            images.append(RecordImage(path, boxes, size, where, header.orientation, oriented,
                                      offset=offset))
    return clean(LabelledSet(images, classes, Drops(), LAYOUT))


def read_splits(root, id_names=(), frame=Frame.ORIENTED):
    """{split: LabelledSet} of the ``.rec`` files in ``root``'s ``train`` and ``validation``
    folders: the channels, or the host's copy of Pipe-mode channels (:func:`drain_pipes`); boxes
    in pixels of the ``frame``."""
    sets = {}
    for split in (TRAIN, VALIDATION):
        paths = rec_files(os.path.join(root, split))
        if paths:
            sets[split] = read_files(paths, root, id_names, frame)
    if TRAIN not in sets:
        raise DataError("no RecordIO (.rec) file in the 'train' channel (%s)."
                        % os.path.join(root, TRAIN),
                        "send the .rec files im2rec wrote in the 'train' channel "
                        "(ContentType application/x-recordio).")
    return sets


# ------------------------------------------------------------------------------------ training

def index_path(index_dir, rec_path):
    """The index file of one ``.rec`` file under ``index_dir`` (named by the file's path)."""
    digest = hashlib.sha1(os.path.abspath(rec_path).encode()).hexdigest()[:16]
    return os.path.join(index_dir, "%s-%s.idx" % (os.path.basename(rec_path)[:-len(SUFFIX)], digest))


def write_indexes(images, index_dir):
    """MXNet's index files (``key <TAB> byte offset`` per line, key = the image's position in
    ``images``) for every ``.rec`` file of ``images``: {rec path: index path}. Written whole and
    renamed into place, so ranks writing the same index never see half of one."""
    from detector_training.core.files import atomic_write_text

    os.makedirs(index_dir, exist_ok=True)
    lines = {}
    for key, image in enumerate(images):
        lines.setdefault(image.path, []).append("%d\t%d\n" % (key, image.offset))
    written = {}
    for rec_path, rows in lines.items():
        written[rec_path] = index_path(index_dir, rec_path)
        atomic_write_text(written[rec_path], "".join(rows))
    return written


class RecordDetection(LabelledDetection):
    """Detection samples read from ``.rec`` files by offset: ``dataset[i]`` is ``(image NDArray
    HxWx3, label float32 rows [x1, y1, x2, y2, class])``, the record read with MXNet
    (``MXIndexedRecordIO.read_idx``, ``recordio.unpack``) and its image bytes decoded in the
    image's frame (``images.decode``, turned upright where its ``oriented`` says). Each process
    opens its own readers (data-loader workers are forked). ``index_dir``: where the index files
    go; None: a private temporary folder, removed with the dataset."""

    def __init__(self, images, labels, classes, index_dir=None):
        super().__init__([image.path for image in images], labels, classes,
                         [image.oriented for image in images])
        if index_dir is None:  # a private folder, removed when the dataset is
            index_dir = tempfile.mkdtemp(prefix="detector-recordio-index-")
            weakref.finalize(self, shutil.rmtree, index_dir, True)
        self._indexes = write_indexes(images, index_dir)
        self._readers, self._pid = {}, None

    def _reader(self, rec_path):
        import mxnet as mx

        if self._pid != os.getpid():
            self._readers, self._pid = {}, os.getpid()
        if rec_path not in self._readers:
            self._readers[rec_path] = mx.recordio.MXIndexedRecordIO(
                self._indexes[rec_path], rec_path, "r")
        return self._readers[rec_path]

    def __getitem__(self, idx):
        import mxnet as mx

        _header, data = mx.recordio.unpack(self._reader(self._paths[idx]).read_idx(idx))
        return decode_nd(io.BytesIO(data), self._oriented[idx]), self._labels[idx].copy()

    def __getstate__(self):
        return dict(self.__dict__, _readers={}, _pid=None)


# ------------------------------------------------------------------------------------ Pipe mode

def pipe_fifos(channels_dir, input_data_config):
    """{split: epoch-0 FIFO} of the split channels that stream RecordIO in Pipe mode."""
    return {split: os.path.join(channels_dir, "%s_0" % split) for split in (TRAIN, VALIDATION)
            if is_pipe_channel((input_data_config or {}).get(split) or {})}


def copy_fifo(fifo, target, chunk=1 << 20):
    """Copy a FIFO's bytes to ``target``; returns the byte count."""
    total = 0
    with open(fifo, "rb") as source, open(target, "wb") as out:
        while True:
            data = source.read(chunk)
            if not data:
                return total
            out.write(data)
            total += len(data)


def drain_pipes(fifos, work_dir, world, launch, wait_timeout_s, poll_s=1.0):
    """The folder holding the Pipe-mode channels' records, copied once per host as the channels
    would hold them (``<work_dir>/recordio/<split>/<split>.rec``): local rank 0 copies each FIFO
    (read once, from start to end) under the host's lock and writes the completion marker; the
    host's other ranks wait for it."""
    root = os.path.join(os.path.abspath(work_dir), DATA_DIR_NAME)
    copies = {split: os.path.join(root, split, split + SUFFIX) for split in fifos}
    key = pipe_mode.drain_key(fifos, "recordio")

    def fill(staging):
        sizes = {}
        for split, fifo in sorted(fifos.items()):
            if not os.path.exists(fifo):
                raise DataError("channel '%s' is in Pipe mode but its FIFO %s does not exist."
                                % (split, fifo), "send the channel's .rec files in Pipe mode "
                                "(ContentType application/x-recordio).")
            os.makedirs(os.path.join(staging, split))
            sizes[split] = copy_fifo(fifo, os.path.join(staging, split, split + SUFFIX))
            LOG.info("data: channel '%s' (Pipe mode): %.1f MB of RecordIO copied to %s",
                     split, sizes[split] / 1048576.0, copies[split])
        return {"bytes": sizes}

    return host_once.fill_once(root, key, launch, world.is_local_main, fill, wait_timeout_s,
                               poll_s)
