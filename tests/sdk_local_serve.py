"""Deploy and batch-transform with the SageMaker Python SDK v2 in local mode (run with .venv-sdk's
python).

Usage: sdk_local_serve.py SPEC.json. SPEC has image, serving_port, image_path (one JPEG to
predict), and either fit (data_dir, output_dir, hyperparameters: train first, then
``estimator.deploy``) or model_data (a model.tar.gz to deploy as a ``Model``); optionally
custom_attributes (sent with the prediction, e.g. ``threshold=0``); with transform_dir
and transform_output also a local batch transform (SingleRecord) of that folder of images, its
container given transform_env (optional, e.g. ``{"DETECTOR_SCORE_THRESHOLD": "0"}``).
Prints the container logs and, last, one line `RESULT {json}`: the answer to ``predict`` and the
transform's output folder.
"""

import json
import sys


def main(spec_path):
    with open(spec_path) as handle:
        spec = json.load(handle)
    from sagemaker.estimator import Estimator
    from sagemaker.local import LocalSession
    from sagemaker.model import Model
    from sagemaker.predictor import Predictor

    session = LocalSession()
    session.config = {"local": {"local_code": True, "serving_port": spec["serving_port"],
                                "container_config": {"shm_size": "1g"}}}
    role = "arn:aws:iam::111111111111:role/SageMakerRole"
    if "fit" in spec:
        fit = spec["fit"]
        trained = Estimator(image_uri=spec["image"], role=role, instance_count=1, instance_type="local",
                            hyperparameters=fit["hyperparameters"], output_path="file://" + fit["output_dir"],
                            sagemaker_session=session, base_job_name="detector-local")
        trained.fit({"voc": "file://" + fit["data_dir"]}, wait=True, logs=True)
        predictor = trained.deploy(initial_instance_count=1, instance_type="local")
    else:
        trained = Model(image_uri=spec["image"], model_data="file://" + spec["model_data"], role=role,
                        predictor_cls=Predictor, sagemaker_session=session)
        predictor = trained.deploy(initial_instance_count=1, instance_type="local")
    try:
        with open(spec["image_path"], "rb") as handle:
            # CustomAttributes travel as X-Amzn-SageMaker-Custom-Attributes (threshold=0: every detection).
            args = {"CustomAttributes": spec["custom_attributes"]} if spec.get("custom_attributes") else None
            answer = json.loads(predictor.predict(handle.read(), initial_args=args))
    finally:
        predictor.delete_endpoint()
    if "transform_dir" in spec:
        transformer = trained.transformer(instance_count=1, instance_type="local", strategy="SingleRecord",
                                          output_path="file://" + spec["transform_output"],
                                          env=spec.get("transform_env"))
        transformer.transform("file://" + spec["transform_dir"], content_type="application/x-image",
                              split_type=None, wait=True, logs=False)  # logs: CloudWatch only
    print("RESULT " + json.dumps({"prediction": answer}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
