"""GluonCV Faster R-CNN training for SageMaker: engine, job contract and entry points."""

__version__ = "0.1.0"
