"""Data: the data formats (``formats/``: the registry and one module per format), the readers of
exports, COCO JSON and Ground Truth manifests (``readers/``), labelled images, validation carving,
samplers and loaders, Pipe mode, the verified VOC fetch once per host, generated datasets."""
