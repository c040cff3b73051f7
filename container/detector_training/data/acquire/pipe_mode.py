"""Pipe mode: an augmented manifest as SageMaker delivers it, drained once per host to local disk.

SageMaker sends an ``AugmentedManifestFile`` channel (``RecordWrapperType=RecordIO``,
``AttributeNames=["source-ref", "<attribute>"(, "<attribute>-metadata")]``) through the FIFO
``/opt/ml/input/data/<channel>_<epoch>``: per manifest line, one RecordIO record per attribute in
that order, the image's bytes for ``source-ref`` and the JSON value of the others. A FIFO can be
read once, and every rank of a host needs every image, so local rank 0 drains the first epoch's
FIFO to files under the host's work directory (under the once-per-host lock and completion marker
of :mod:`host_once`), and every rank then reads that copy as a File-mode manifest
(:func:`manifest.manifest_datasets`).

RecordIO framing (dmlc-core, which MXNet and SageMaker use): ``uint32 0xced7230a``, ``uint32 lrec``
(payload length ``lrec & (2**29 - 1)``, continuation flag ``lrec >> 29``: 0 a whole record; 1, 2, 3
the first, a middle and the last part of one split where its payload held the magic number, which
joins the parts again), the payload, zero padding to a multiple of 4 bytes. A wrong magic, a
truncated record, a label that is not the expected JSON: a DataError naming the record's number.
Nothing is half-written: the copy is made in a private folder and renamed into place when complete.
"""

import hashlib
import json
import logging
import os
import stat
import struct

from detector_training.data.acquire import host_once
from detector_training.data.readers import manifest
from detector_training.errors import DataError

LOG = logging.getLogger("detector_training")

MAGIC = 0xCED7230A
LENGTH_MASK = (1 << 29) - 1
MAX_RECORD_BYTES = 64 << 20  # one image; Ground Truth's console takes images up to 40 MB
DATA_DIR_NAME = "manifest"  # <work_dir>/manifest/{train,validation,images}
DRAINED_ATTRIBUTE = "label"  # the attribute name in the drained manifest when none is configured
PIPE_CHANNELS = manifest.MANIFEST_CHANNELS + (manifest.VALIDATION_CHANNEL,)

FIX_FRAMING = ("send the channel as SageMaker does for an augmented manifest: "
               "RecordWrapperType=RecordIO with AttributeNames [\"source-ref\", \"<attribute>\"] "
               "(optionally \"<attribute>-metadata\").")


def _read_exact(stream, size, where, what):
    data = stream.read(size)
    if len(data) != size:
        raise DataError("%s is truncated: %s has %d of %d bytes." % (where, what, len(data), size),
                        FIX_FRAMING)
    return data


def read_records(stream, channel):
    """``(record number, payload)`` of each RecordIO record in ``stream``, numbered from 1."""
    number, parts = 0, []
    while True:
        header = stream.read(8)
        if not header:
            if parts:
                raise DataError("channel '%s' record %d is truncated: its last part is missing."
                                % (channel, number + 1), FIX_FRAMING)
            return
        where = "channel '%s' record %d" % (channel, number + 1)
        if len(header) < 8:
            raise DataError("%s is truncated: its header has %d of 8 bytes." % (where, len(header)),
                            FIX_FRAMING)
        magic, lrec = struct.unpack("<II", header)
        if magic != MAGIC:
            raise DataError("%s has the wrong magic number 0x%08x (RecordIO's is 0x%08x): the "
                            "channel is not RecordIO-framed." % (where, magic, MAGIC), FIX_FRAMING)
        flag, length = lrec >> 29, lrec & LENGTH_MASK
        if flag > 3 or (flag in (0, 1)) == bool(parts):
            raise DataError("%s has the continuation flag %d %s." % (
                where, flag, "inside a split record" if parts else "without a record to continue"),
                FIX_FRAMING)
        if length + sum(len(p) for p in parts) > MAX_RECORD_BYTES:
            raise DataError("%s is larger than %d MB." % (where, MAX_RECORD_BYTES >> 20),
                            "keep each image under %d MB." % (MAX_RECORD_BYTES >> 20))
        payload = _read_exact(stream, length, where, "its payload")
        _read_exact(stream, -length % 4, where, "its padding")
        parts.append(payload)
        if flag in (0, 3):
            number += 1
            yield number, struct.pack("<I", MAGIC).join(parts)
            parts = []


def _is_json_object(payload):
    # An image's bytes (JPEG, PNG, ...) never start with '{'.
    return payload.lstrip()[:1] == b"{"


def _check_image(payload, where):
    if _is_json_object(payload):
        raise DataError("%s is JSON where an image's bytes were expected (each line's records are "
                        "source-ref's image, the label, optionally its metadata)." % where,
                        FIX_FRAMING)


def group_lines(records, channel):
    """``(first record number, image bytes, label, metadata or None)`` per manifest line: an
    image record, its label's JSON, and the metadata's JSON when the channel sends it."""
    pending = None
    for number, payload in records:
        where = "channel '%s' record %d" % (channel, number)
        if pending is None:
            _check_image(payload, where)
            pending = [number, payload, None, None]
        elif pending[2] is None:
            label = manifest.parse_json_line(payload, where + " (the label)")
            manifest.check_label(label, where)
            pending[2] = label
        elif _is_json_object(payload):
            metadata = manifest.parse_json_line(payload, where + " (the label's metadata)")
            if not (isinstance(metadata, dict) and ("class-map" in metadata or "type" in metadata)):
                _check_image(payload, where)
            manifest.check_class_map(metadata, where)
            pending[3] = metadata
            yield tuple(pending)
            pending = None
        else:  # no metadata: this record is the next line's image
            yield tuple(pending)
            pending = [number, payload, None, None]
    if pending is not None:
        if pending[2] is None:
            raise DataError("channel '%s' ends after record %d, an image without its label."
                            % (channel, pending[0]), FIX_FRAMING)
        yield tuple(pending)


def drain_channel(fifo, channel, target, attribute):
    """Copy one channel's records from ``fifo`` into ``target``: the images as
    ``images/<channel>/record-<n>`` and the lines as ``<channel>/<channel>.manifest`` with those
    files as source-refs. Returns (lines, bytes read)."""
    images = os.path.join(target, manifest.IMAGES_CHANNEL, channel)
    os.makedirs(images)
    os.makedirs(os.path.join(target, channel))
    lines = 0
    with open(fifo, "rb") as stream, \
            open(os.path.join(target, channel, channel + ".manifest"), "w") as out:
        counted = CountingReader(stream)
        for number, image, label, metadata in group_lines(read_records(counted, channel), channel):
            name = "record-%06d" % number
            with open(os.path.join(images, name), "wb") as handle:
                handle.write(image)
            line = {manifest.SOURCE_REF: "%s/%s" % (channel, name), attribute: label,
                    attribute + manifest.METADATA_SUFFIX: dict(
                        metadata or {}, type="groundtruth/object-detection")}
            out.write(json.dumps(line) + "\n")
            lines += 1
    return lines, counted.count


class CountingReader:
    """A binary stream that counts the bytes read from it (a FIFO cannot tell its position)."""

    def __init__(self, stream):
        self._stream, self.count = stream, 0

    def read(self, size):
        data = self._stream.read(size)
        self.count += len(data)
        return data


def pipe_channels(channels_dir, input_data_config):
    """{channel: FIFO path} of the manifest channels in Pipe mode (their epoch-0 FIFOs)."""
    found = {}
    for name in PIPE_CHANNELS:
        fifo = os.path.join(channels_dir, "%s_0" % name)
        is_fifo = os.path.exists(fifo) and stat.S_ISFIFO(os.stat(fifo).st_mode)
        if is_fifo or (input_data_config.get(name) or {}).get("TrainingInputMode") == "Pipe":
            found[name] = fifo
    return found


def drain_key(fifos, attribute):
    """What a drained copy holds: these FIFOs (each job's are new files, so a copy from an
    earlier launch never matches), read with this attribute name. The same on every rank."""
    identity = []
    for channel, path in sorted(fifos.items()):
        try:
            info = os.stat(path)
            identity.append([channel, path, info.st_dev, info.st_ino])  # times change as it is read
        except OSError:
            identity.append([channel, path, None, None])
    payload = json.dumps({"fifos": identity, "attribute": attribute,
                          "format": host_once.MARKER_FORMAT}, sort_keys=True)
    return hashlib.sha1(payload.encode()).hexdigest()[:20]


def check_replicated(input_data_config, hosts):
    """Every host must see the whole manifest and every image: each rank samples its shard from
    the same list. ShardedByS3Key gives each host a part of them."""
    sharded = sorted(name for name in PIPE_CHANNELS + (manifest.IMAGES_CHANNEL,)
                     if (input_data_config.get(name) or {}).get("S3DistributionType") == "ShardedByS3Key")
    if sharded and len(hosts) > 1:
        raise DataError("channel(s) %s are ShardedByS3Key across %d hosts, so each host would see "
                        "another part of the manifest." % (", ".join(sharded), len(hosts)),
                        "send the manifest and images channels FullyReplicated (the ranks shard "
                        "the images among themselves).")


def manifest_root(config, env, world, wait_timeout_s, poll_s=1.0):
    """The folder the manifest reader reads: the channels themselves in File mode; in Pipe mode
    the copy that local rank 0 of this host drains from the FIFOs (the other ranks wait for it)."""
    check_replicated(env.input_data_config, env.hosts)
    fifos = pipe_channels(env.paths.channels_dir, env.input_data_config)
    if not fifos:
        return env.paths.channels_dir
    attribute = config.label_attribute or DRAINED_ATTRIBUTE
    root = os.path.join(os.path.abspath(env.work_dir), DATA_DIR_NAME)
    launch = host_once.launch_token(env.environ)
    key = drain_key(fifos, attribute)

    def fill(staging):
        counts = {}
        for channel, fifo in sorted(fifos.items()):
            if not os.path.exists(fifo):
                raise DataError("channel '%s' is in Pipe mode but its FIFO %s does not exist."
                                % (channel, fifo), FIX_FRAMING)
            counts[channel] = drain_channel(fifo, channel, staging, attribute)
            LOG.info("data: channel '%s' (Pipe mode): %d lines, %.1f MB drained to %s",
                     channel, counts[channel][0], counts[channel][1] / 1048576.0, root)
        return {"lines": {c: n for c, (n, _) in counts.items()}}

    return host_once.fill_once(root, key, launch, world.is_local_main, fill, wait_timeout_s,
                               poll_s)
