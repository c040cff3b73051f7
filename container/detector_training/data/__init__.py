"""Data: the data formats (``formats/``: the registry and one module per format), the readers of
exports, COCO JSON and Ground Truth manifests (``readers/``), the acquiring of data (``acquire/``:
sources, the verified VOC fetch once per host, Pipe mode), generated datasets (``generated/``), and
here the pieces they share: labelled images, validation carving, samplers and loaders, negatives."""
