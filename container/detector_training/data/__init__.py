"""Data: the data formats (``formats/``: the registry and one module per format) and the readers of
exports (``layouts/``), labelled images, validation carving, samplers and loaders, Ground Truth
manifests and Pipe mode, the verified VOC fetch once per host, generated datasets."""
