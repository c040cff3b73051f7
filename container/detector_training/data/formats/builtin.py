"""The SageMaker built-in Object Detection algorithm's inputs, so that its jobs run here with the
same channels (``dataset=builtin``, recognised from them):

- the image format: ``train``/``validation`` images and ``train_annotation``/
  ``validation_annotation`` JSON, one per image (reader: data/readers/builtin_json.py);
- RecordIO: ``.rec`` files as im2rec packs detection data in ``train``/``validation``, in File
  mode or through Pipe mode's FIFOs, copied once per host (reader: data/readers/builtin_recordio.py;
  records are read by offset with MXNet's reader, never unpacked to files).

One format for both, as the algorithm takes both in the same channels with the same class ids
(named by ``categories``, else ``classes``, else the ids themselves); scored by VOC07 mAP, as the
algorithm's ``validation:mAP``.
"""

import os

from detector_training.data.acquire import host_once
from detector_training.data.formats.data_format import LabelledFormat
from detector_training.data.readers import builtin_json, builtin_recordio
from detector_training.data.readers.images import Frame
from detector_training.data.acquire.sources import FetchOptions
from detector_training.errors import DataError

ANNOTATION_CHANNELS = tuple(builtin_json.annotation_channel(s)
                            for s in (builtin_json.TRAIN, builtin_json.VALIDATION))


class Builtin(LabelledFormat):
    name = "builtin"
    title = "the SageMaker built-in Object Detection algorithm's inputs"
    channels = ("train", "train_annotation", "validation", "validation_annotation")
    # Its labels come from the tools that show photos upright (Ground Truth); a record holds the
    # labelled file's bytes, tag included, when im2rec packs them as they are.
    frame = Frame.ORIENTED
    names_by_classes = True  # class ids without 'categories' are named by 'classes'

    def recognise(self, channel):
        if channel.name in ANNOTATION_CHANNELS:
            count = len(builtin_json.annotation_files(channel.path))
            return "image format, %d annotation JSON file(s)" % count if count else None
        files = builtin_recordio.rec_files(channel.path)
        if files:
            return "RecordIO, %d .rec file(s)" % len(files)
        if builtin_recordio.is_pipe_channel(channel.config):
            return "RecordIO in Pipe mode (%s)" % builtin_recordio.CONTENT_TYPE
        return None

    def data_root(self, config, env, world):
        """The channels folder; in Pipe mode the host's copy of the FIFOs (read once by local
        rank 0, the other ranks wait), laid out as the channels are."""
        fifos = builtin_recordio.pipe_fifos(env.paths.channels_dir, env.input_data_config)
        if not fifos:
            return super().data_root(config, env, world)
        options = FetchOptions.from_environ(env.environ)
        return builtin_recordio.drain_pipes(fifos, env.work_dir, world,
                                            host_once.launch_token(env.environ),
                                            options.wait_timeout_s, options.poll_s)

    def read_labelled(self, data_root, split, config):
        # Both splits are read at once: every file's categories name the class ids of both.
        key = (data_root, tuple(config.classes))
        if getattr(self, "_sets", (None,))[0] != key:
            self._sets = (key, self._read_splits(data_root, tuple(config.classes), self.frame))
        return self._sets[1].get(split)

    @staticmethod
    def _read_splits(data_root, id_names, frame):
        images = builtin_json.recognise(data_root)
        records = builtin_recordio.recognise(data_root)
        if images and records:
            raise DataError("the channels hold both of the built-in algorithm's layouts: the image "
                            "format (%s) and RecordIO (%s)." % (
                                ", ".join(os.path.basename(a) for _i, a in images.values()),
                                ", ".join("%s: %s" % item for item in records.items())),
                            "send one of them.")
        if images:
            return builtin_json.read_splits(data_root, id_names, frame)
        return builtin_recordio.read_splits(data_root, id_names, frame)

    def detection_reader(self, images, labels, classes):
        if images and isinstance(images[0], builtin_recordio.RecordImage):
            return builtin_recordio.RecordDetection(images, labels, classes)
        return super().detection_reader(images, labels, classes)
