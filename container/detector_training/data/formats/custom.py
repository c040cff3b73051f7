"""dataset=custom: your own classes in Pascal VOC XML, in any of the folder shapes it comes in
(``data/readers/voc_exports.py``): a VOCdevkit tree (extracted in the channel, or your own tars
named in ``data_checksums``), CVAT's "Pascal VOC 1.1", labelImg's two, Roboflow's. Never the
official VOC tars (that is dataset=voc).

A VOCdevkit tree's splits are ``train_splits``/``val_splits`` as before; an export's are its own:
its training split (``train``, ``default``, or its only one) trains, its validation split
(``val``, ``valid``, ``validation``) or the ``validation`` channel's export validates, else a
seeded share is carved (``val_fraction``)."""

import logging
import os

from detector_training.data.formats.data_format import VALIDATION_CHANNEL, LabelledFormat
from detector_training.data.formats.voc import VOC, VOC_PRESET, check_voc_splits, devkit_split
from detector_training.data.readers import split_names, voc_exports
from detector_training.data.readers.images import Frame
from detector_training.data.acquire.sources import FetchOptions
from detector_training.data.acquire.voc_fetch import (DATA_CHANNELS, OFFICIAL, acquire_voc,
                                              channel_holds_extracted, tar_specs)
from detector_training.data.acquire.voc_tree import find_year_dirs
from detector_training.errors import DataError

LOG = logging.getLogger("detector_training")


def where_found(export, channel_path):
    """"<layout> in <folder>" for the log and the recognition message."""
    folder = os.path.relpath(export.root, channel_path)
    return export.layout if folder == "." else "%s in %s" % (export.layout, folder)


class CustomVOC(LabelledFormat):
    """Pascal VOC XML with your own classes: recognised by a VOCdevkit/VOC<year> tree, or by a
    labelling tool's VOC export, in the channel."""

    name = "custom"
    title = "Pascal VOC XML (a VOCdevkit tree or a labelling tool's export)"
    channels = DATA_CHANNELS + (VALIDATION_CHANNEL,)
    preset = VOC_PRESET
    # labelImg shows the stored pixels, CVAT the upright picture: each XML's <size> tells which.
    frame = Frame.BY_SIZE

    def recognise(self, channel):
        if not os.path.isdir(channel.path):
            return None
        years = find_year_dirs(channel.path)
        if years:
            return ", ".join(os.path.relpath(path, channel.path) for path in years.values())
        export = voc_exports.find_export(channel.path)
        return where_found(export, channel.path) if export else None

    def check_config(self, config):
        return check_voc_splits(config)

    def generate(self, channels_dir, n_train, n_test, n_train_2012=0, seed=0):
        """The generated VOCdevkit of dataset=voc, in the 'voc' channel (its classes are read
        from the annotations)."""
        VOC().generate(channels_dir, n_train, n_test, n_train_2012, seed)

    def data_root(self, config, env, world):
        """A VOCdevkit tree: the folder holding it (the channel's, or your own tars fetched from
        the channel, data_s3_uri or a mirror in data_mirrors, never the official VOC mirror).
        A tool's export: the channels folder (each split's export is read from its channel)."""
        name, path = env.data_channel(DATA_CHANNELS)
        specs = tar_specs(config.data_checksums)
        mirrors = tuple(m for m in config.data_mirrors if m.strip() != OFFICIAL)
        has_tars = bool(path) and any(os.path.isfile(os.path.join(path, s.name)) for s in specs)
        if (path and channel_holds_extracted(path, specs)) or has_tars or config.data_s3_uri \
                or mirrors:
            return acquire_voc(config, env, world, env.work_dir,
                               FetchOptions.from_environ(env.environ), DATA_CHANNELS, mirrors)
        export = voc_exports.find_export(path) if path else None
        if export is not None:
            LOG.info("data: dataset=custom: %s in channel '%s'", where_found(export, path), name)
            return env.paths.channels_dir
        raise DataError("dataset=custom: %s." % (
            "channel '%s' holds no Pascal VOC XML (no VOCdevkit/VOC<year> tree, no annotation "
            "export) and none of the tars %s (its top level: %s)"
            % (name, ", ".join(s.name for s in specs), ", ".join(sorted(os.listdir(path))[:12])
               or "nothing")
            if path else "no '%s' channel (nor %s) holds data" % (
                DATA_CHANNELS[0], " or ".join("'%s'" % c for c in DATA_CHANNELS[1:]))),
            "put the export as the labelling tool wrote it (CVAT, labelImg, Roboflow; see "
            "docs/data.md), or a VOCdevkit tree, in the 'train' channel, or your own tars with "
            "data_checksums naming them; the official VOC tars are dataset=voc.")

    def read_labelled(self, data_root, split, config):
        if find_year_dirs(data_root):
            return devkit_split(data_root, split, config, (), self.frame)
        train_dir = self.channel_path(data_root, "train")
        if train_dir is None:
            return None
        if find_year_dirs(train_dir):  # the channels folder (the data check): a VOCdevkit channel
            return devkit_split(train_dir, split, config, (), self.frame)
        export = self._export(train_dir)
        if split == "train":
            names = split_names(export, "train")
            if not names:
                raise DataError("the %s in %s has no training split: its splits are %s."
                                % (export.layout, train_dir, ", ".join(sorted(export.splits))),
                                "name the training subset train (or default), or put only the "
                                "training data in the 'train' channel.")
            unused = sorted(set(export.splits) - set(names) - set(split_names(export, "validation")))
            if unused:
                LOG.info("data: custom: split %s of the export not used (not train or "
                         "validation)", ", ".join(unused))
            return export.read(names, frame=self.frame)
        val_dir = self.channel_path(data_root, VALIDATION_CHANNEL)
        if val_dir is not None:
            export = self._export(val_dir)
            names = split_names(export, "validation") or split_names(export, "train") \
                or list(export.splits)
            return export.read(names, frame=self.frame)
        names = split_names(export, "validation")
        return export.read(names, frame=self.frame) if names else None

    def _export(self, folder):
        return self.export_in(folder, voc_exports.find_export, "Pascal VOC XML annotations",
                              "put the export as the labelling tool wrote it in the channel.")
