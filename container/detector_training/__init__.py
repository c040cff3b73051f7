"""GluonCV object detector training for SageMaker (Faster R-CNN, Mask R-CNN, YOLOv3, SSD), built in
floors: errors/settings/values < core < data < families < job < the top (main, rank, commands,
evaluate, inference, predict, serve)."""

__version__ = "0.1.0"
