"""Build and start object-detector training jobs for the detector-training image, deploy their
models and batch-transform images with them (SageMaker SDK v2).

    from sagemaker_launch import build_estimator, launch
    est = launch(image_uri=..., role=..., instance_type="ml.p3.16xlarge", instance_count=2,
                 hyperparameters={"epochs": 20}, inputs={"voc": "s3://bucket/voc/"})
"""

from .deploy import DetectorPredictor, deploy, transform
from .evaluation import compare, evaluate, read_evaluation
from .job import (JobSpec, LaunchError, build_estimator, check_data, check_inputs,
                  hyperparameters_for, launch, manifest_inputs, processes_per_host)
from .results import download_model, summary
from .run_onnx import detect as detect_onnx
from .tuning import build_tuner

__all__ = ["JobSpec", "LaunchError", "build_estimator", "check_data", "check_inputs", "hyperparameters_for", "launch", "manifest_inputs",
           "processes_per_host", "build_tuner", "download_model", "summary", "DetectorPredictor",
           "deploy", "transform", "evaluate", "compare", "read_evaluation", "detect_onnx"]
