"""Data: VOC/COCO readers, samplers and loaders, verified fetching and safe extraction, generated datasets."""
