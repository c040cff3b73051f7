"""Run one evaluation job with the launcher's ``evaluate`` in SageMaker SDK v2 local mode (run with
.venv-sdk's python).

Usage: sdk_local_evaluate.py SPEC.json — SPEC has image, model_dir (holding model.tar.gz),
test_dir, output_dir, hyperparameters. Prints the container logs (streamed by the SDK) and, last,
one line `RESULT {json}` with the job name and model_data.
"""

import json
import sys


def main(spec_path):
    with open(spec_path) as handle:
        spec = json.load(handle)
    from sagemaker_launch import evaluate

    estimator = evaluate("file://" + spec["model_dir"], "file://" + spec["test_dir"], spec["image"],
                         "arn:aws:iam::111111111111:role/SageMakerRole", "local",
                         hyperparameters=spec["hyperparameters"],
                         output_path="file://" + spec["output_dir"], shm_size="1g")
    print("RESULT " + json.dumps({"job_name": estimator.latest_training_job.name,
                                  "model_data": estimator.model_data}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
