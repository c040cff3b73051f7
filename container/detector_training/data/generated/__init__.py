"""Generated datasets for tests, benchmarks and demo jobs: Pascal VOC data and its three tars
(``synthetic_voc``, also ``detector-generate-voc``), COCO-format instance data (``synthetic_coco``)."""
