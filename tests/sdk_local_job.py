"""Run one training job with the SageMaker Python SDK v2 in local mode (run with .venv-sdk's python).

Usage: sdk_local_job.py SPEC.json — SPEC has image, instance_count, hyperparameters, data_dir,
output_dir, metric_definitions. Prints the container logs (streamed by the SDK) and, last, one line
`RESULT {json}` with the job name and model_data.
"""

import json
import sys


def main(spec_path):
    with open(spec_path) as handle:
        spec = json.load(handle)
    from sagemaker.estimator import Estimator
    from sagemaker.local import LocalSession

    session = LocalSession()
    # Docker's default 64 MB /dev/shm breaks multi-worker data loading; give the job room.
    session.config = {"local": {"local_code": True, "container_config": {"shm_size": "1g"}}}
    estimator = Estimator(
        image_uri=spec["image"],
        role="arn:aws:iam::111111111111:role/SageMakerRole",
        instance_count=spec["instance_count"],
        instance_type="local",
        hyperparameters=spec["hyperparameters"],
        output_path="file://" + spec["output_dir"],
        metric_definitions=spec["metric_definitions"],
        sagemaker_session=session,
        base_job_name="detector-local",
    )
    estimator.fit({"voc": "file://" + spec["data_dir"]}, wait=True, logs=True)
    print("RESULT " + json.dumps({"job_name": estimator.latest_training_job.name,
                                  "model_data": estimator.model_data}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
