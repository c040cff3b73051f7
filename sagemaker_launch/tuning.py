"""Hyperparameter tuning with objective validation:mAP (the container's metric line)."""

from detector_training.job.metrics import METRIC_DEFINITIONS, OBJECTIVE_METRIC


def default_ranges():
    from sagemaker.tuner import ContinuousParameter

    return {
        "lr": ContinuousParameter(1e-4, 1e-2, scaling_type="Logarithmic"),
        "wd": ContinuousParameter(1e-5, 1e-3, scaling_type="Logarithmic"),
        "momentum": ContinuousParameter(0.85, 0.95),
    }


def build_tuner(estimator, max_jobs=8, max_parallel_jobs=2, ranges=None, base_tuning_job_name="detector-tune"):
    from sagemaker.tuner import HyperparameterTuner

    return HyperparameterTuner(
        estimator,
        objective_metric_name=OBJECTIVE_METRIC,
        hyperparameter_ranges=ranges or default_ranges(),
        metric_definitions=[dict(d) for d in METRIC_DEFINITIONS],
        objective_type="Maximize",
        max_jobs=max_jobs,
        max_parallel_jobs=max_parallel_jobs,
        base_tuning_job_name=base_tuning_job_name,
    )
