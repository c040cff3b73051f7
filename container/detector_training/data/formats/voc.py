"""The official Pascal VOC 2007/2012 (dataset=voc: its 20 classes; the tars from the channel,
data_s3_uri or the mirrors), read into the labelled form every format reads into (its VOCdevkit
tree through data/readers/voc_exports.py, as dataset=custom reads one), once. Your own classes in
VOC XML, in a VOCdevkit tree or a labelling tool's export, are dataset=custom (custom.py)."""

import os

from detector_training.values import is_voc_split
from detector_training.errors import DataError
from detector_training.data.formats.data_format import LabelledFormat
from detector_training.data.labelled import select
from detector_training.data.readers import voc_exports
from detector_training.data.readers.images import Frame
from detector_training.data.acquire.sources import FetchOptions
from detector_training.data.acquire.voc_fetch import DATA_CHANNELS, acquire_voc
from detector_training.data.acquire.voc_tree import VOC_TARS, find_year_dirs

VOC_SPLITS = ("2007_trainval", "2012_trainval")
VOC_VAL_SPLITS = ("2007_test",)
# The official dataset's 20 classes in its order (GluonCV's VOCDetection.CLASSES; a test holds
# them equal): its label rows index this list.
VOC_CLASSES = ("aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat", "chair",
               "cow", "diningtable", "dog", "horse", "motorbike", "person", "pottedplant",
               "sheep", "sofa", "train", "tvmonitor")
# GluonCV's train_faster_rcnn.py defaults for VOC. lr_base_batch_size is the global batch the
# published learning rate was tuned for (4 GPUs x 1 image).
VOC_PRESET = dict(epochs=20, lr=0.001, lr_decay_epoch=(14, 20), lr_warmup=-1, wd=5e-4,
                  lr_base_batch_size=4, train_splits=VOC_SPLITS, val_splits=VOC_VAL_SPLITS)


def devkit_split(data_root, split, config, classes, frame):
    """``split``'s ("train": ``train_splits``; else ``val_splits``) images of the VOCdevkit tree
    under ``data_root`` as one LabelledSet (``classes``: declared, data/labelled.select; ``frame``: the
    frame its boxes are in, images/Frame), None when no split is configured."""
    names = list(config.train_splits if split == "train" else config.val_splits)
    if not names:
        return None
    export = voc_exports.find_export(data_root)
    if export is None:
        raise DataError("no VOCdevkit/VOC<year> tree under %s." % data_root,
                        "provide the VOC tars or an extracted VOCdevkit in the 'voc' channel.")
    return select(export.read(names, frame=frame), classes)


def check_voc_splits(config):
    """Problems of train_splits/val_splits for a VOCdevkit tree (YEAR_NAME each)."""
    problems = []
    for splits_key in ("train_splits", "val_splits"):
        bad = [s for s in getattr(config, splits_key) or () if not is_voc_split(s)]
        if bad:
            problems.append("%s=%s: expected YEAR_NAME such as 2007_trainval"
                            % (splits_key, ",".join(bad)))
    return problems


class VOC(LabelledFormat):
    """The official Pascal VOC 2007/2012: recognised by its tars in the channel."""

    name = "voc"
    title = "Pascal VOC 2007/2012 (20 classes)"
    channels = DATA_CHANNELS
    preset = VOC_PRESET
    fixed_classes = True  # its 20 classes, in its order
    frame = Frame.STORED  # the official images carry no orientation tag

    def recognise(self, channel):
        tars = [name for name, _ in VOC_TARS if name in channel.names()]
        return "the VOC tars %s" % ", ".join(tars) if tars else None

    def check_config(self, config):
        problems = check_voc_splits(config)
        if config.classes:
            problems.insert(0, "classes is only used with dataset=custom or coco (dataset=voc has "
                               "its 20 classes)")
        if getattr(config, "num_classes", None) not in (None, 20):
            problems.append("num_classes=%d: dataset=voc has its 20 classes (dataset=custom trains "
                            "your own)" % config.num_classes)
        return problems

    def data_root(self, config, env, world):
        return acquire_voc(config, env, world, env.work_dir,
                           FetchOptions.from_environ(env.environ), self.channels)

    def generate(self, channels_dir, n_train, n_test, n_train_2012=0, seed=0):
        """A generated VOCdevkit (VOC2007, and VOC2012 with ``n_train_2012``) in the 'voc'
        channel, kept when one is there."""
        from detector_training.data.generated.synthetic_voc import generate

        channel = os.path.join(channels_dir, "voc")
        if not os.path.isdir(os.path.join(channel, "VOCdevkit")):
            generate(channel, n_train, n_test, n_train_2012, seed=seed)

    def read_labelled(self, data_root, split, config):
        return devkit_split(data_root, split, config, VOC_CLASSES, self.frame)

    def labelled(self, channels_dir, split, config):
        """The data check: the extracted VOCdevkit tree of the data channel (the job's own
        extraction when the job reads it); tars not yet extracted are described when the job
        extracts them."""
        if not find_year_dirs(channels_dir):
            path = next((os.path.join(channels_dir, c) for c in self.channels
                         if os.path.isdir(os.path.join(channels_dir, c))), None)
            if path is None or not find_year_dirs(path):
                raise NotImplementedError
            channels_dir = path
        return self.read_once(channels_dir, split, config)

