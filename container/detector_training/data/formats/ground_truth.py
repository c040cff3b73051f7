"""A SageMaker Ground Truth object-detection manifest (see readers/manifest.py), in File mode or in Pipe
mode (an augmented manifest, drained once per host by pipe_mode.py)."""

import os

from detector_training.errors import DataError
from detector_training.data.readers import manifest
from detector_training.data.common import SubsetDataset, with_validation
from detector_training.data.formats.data_format import DataFormat, LabelledDetection
from detector_training.data.formats.voc import VOC_PRESET
from detector_training.data.readers.images import Frame, Header, read_header
from detector_training.data.negatives import is_negative, log_empty
from detector_training.data.acquire.pipe_mode import manifest_root
from detector_training.data.acquire.sources import FetchOptions


class GroundTruthManifest(DataFormat):
    name = "manifest"
    title = "a Ground Truth bounding-box manifest"
    channels = manifest.MANIFEST_CHANNELS + (manifest.VALIDATION_CHANNEL,)
    preset = VOC_PRESET  # a custom dataset in another layout (its splits are channels)
    options = ("label_attribute",)
    frame = Frame.ORIENTED  # a browser shows the labeller the photo upright; image_size is its size

    def recognise(self, channel):
        """A Pipe-mode RecordIO channel (how SageMaker delivers an augmented manifest), or a
        manifest file at the channel's top level."""
        if channel.pipe and channel.config.get("RecordWrapperType") == "RecordIO":
            return "an augmented manifest in Pipe mode"
        found = [n for n in channel.names() if n.endswith(manifest.MANIFEST_SUFFIXES)]
        return ", ".join(found[:4]) if found else None

    def data_root(self, config, env, world):
        options = FetchOptions.from_environ(env.environ)
        return manifest_root(config, env, world, options.wait_timeout_s, options.poll_s)

    def read(self, config, data_root, instances=False):
        return _manifest_datasets(config, data_root, self.entries, self.frame)

    def entries(self, folder, config):
        """The checked lines of the manifests in ``folder``, parsed once by this instance: the
        job's datasets and its data report read the same entries."""
        read = vars(self).setdefault("_entries", {})
        key = (folder, config.label_attribute)
        if key not in read:
            read[key] = manifest.read_entries(folder, config.label_attribute)
        return read[key]

    def labelled_root(self, data_root, channels_dir):
        return data_root

    def labelled(self, channels_dir, split, config):
        """The split's manifest lines as a LabelledSet: class names from the class maps (else
        ``classes`` in id order, else the ids), images matched in the ``images`` channel when
        there is one (else their source-refs; their EXIF orientation is read from the header of
        those found)."""
        from detector_training.data.labelled import Box, LabelledImage, LabelledSet

        names = (manifest.MANIFEST_CHANNELS if split == "train"
                 else (manifest.VALIDATION_CHANNEL,))
        folder = manifest.channel_in(channels_dir, names)
        if folder is None:
            return None
        entries = self.entries(folder, config)
        id_names = manifest.merge_class_maps(entries) or dict(enumerate(config.classes))
        images = os.path.join(channels_dir, manifest.IMAGES_CHANNEL)
        paths = (manifest.match_images(entries, images) if os.path.isdir(images)
                 else [entry.source_ref for entry in entries])
        labelled = LabelledSet(classes=tuple(id_names[i] for i in sorted(id_names)),
                               layout="Ground Truth manifest in channel '%s'"
                               % os.path.basename(folder))
        for entry, path in zip(entries, paths):
            header = (read_header(path, "%s (of %s)" % (path, entry.where))
                      if os.path.isfile(path) else Header(entry.width, entry.height))
            labelled.images.append(LabelledImage(
                path, size=(entry.width, entry.height), where=entry.where,
                boxes=[Box(*box[:4], label=id_names.get(box[4], str(box[4])), where=entry.where)
                       for box in entry.boxes],
                orientation=header.orientation, oriented=bool(self.frame.oriented(header))))
        return labelled


def _manifest_datasets(config, root, entries_in, frame):
    """A Ground Truth manifest's data (see readers/manifest.py) under ``root``: the ``train`` (or
    ``training``) channel's manifests, the ``validation`` channel's when there is one (not read
    when ``val_fraction`` carves the validation split), images in the ``images`` channel. Without
    a validation manifest (and val_fraction 0), DEFAULT_VAL_FRACTION of the training lines are
    carved, seeded by ``seed``. Classes come from the merged class maps (or ``classes``).
    ``entries_in(folder, config)``: a manifest folder's checked lines; ``frame``: the format's."""
    train_dir = manifest.channel_in(root, manifest.MANIFEST_CHANNELS)
    if train_dir is None:
        raise DataError("no manifest channel: none of %s exists under %s."
                        % (", ".join(manifest.MANIFEST_CHANNELS), root),
                        "give the job a 'train' channel holding the Ground Truth manifest.")
    images = os.path.join(root, manifest.IMAGES_CHANNEL)
    if not os.path.isdir(images):
        raise DataError("no '%s' channel under %s: the manifest's source-refs are looked up there."
                        % (manifest.IMAGES_CHANNEL, root),
                        "give the job an 'images' channel on the S3 prefix the source-refs point "
                        "into (or use Pipe mode, which sends the images with the manifest).")
    train_entries = entries_in(train_dir, config)
    val_dir = None if config.val_fraction > 0 else manifest.channel_in(
        root, (manifest.VALIDATION_CHANNEL,))
    val_entries = entries_in(val_dir, config) if val_dir else []
    classes, index = manifest.class_list(train_entries + val_entries, config.classes)
    train, ratios = _manifest_dataset(train_entries, images, index, classes, config.skip_empty,
                                      "training", frame)
    val, val_ratios = (_manifest_dataset(val_entries, images, index, classes, config.skip_empty,
                                         "validation", frame) if val_entries else (None, None))
    return with_validation(train, ratios, classes, val, val_ratios, config.val_fraction,
                           manifest.DEFAULT_VAL_FRACTION, config.seed)


def _manifest_dataset(entries, images, index, classes, skip_empty, what, frame):
    """A SubsetDataset of the entries with boxes of the trained classes (``index``: class id ->
    class), and those without when ``skip_empty`` is off (kept as negatives), their images found
    under ``images`` (decoded in the ``frame``: the sizes are the manifest's); the count of images
    without boxes is logged. Returns (dataset, aspect ratios)."""
    paths = manifest.match_images(entries, images)
    labels = [manifest.entry_label(entry, index) for entry in entries]
    empty = {i for i, label in enumerate(labels) if is_negative(label)}
    log_empty(what, len(empty), len(entries), skip_empty)
    if len(empty) == len(entries):
        raise DataError("no %s image of the manifest has a box of the classes %s."
                        % (what, ", ".join(classes)),
                        "check the manifest's class ids and the 'classes' hyperparameter.")
    keep = [i for i in range(len(entries)) if not (skip_empty and i in empty)]
    reader = LabelledDetection([paths[i] for i in keep], [labels[i] for i in keep], classes,
                               [bool(frame.oriented())] * len(keep))
    described = ["image %s of %s" % (entries[i].source_ref, entries[i].where) for i in keep]
    dataset = SubsetDataset(reader, range(len(keep)), described,
                            "replace the image, or remove its line from the manifest.")
    return dataset, [entries[i].width / float(entries[i].height) for i in keep]
