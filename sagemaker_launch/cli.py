"""detector-launch: start a training job, deploy its model or batch-transform images with it.

    detector-launch --image 123.dkr.ecr.us-east-1.amazonaws.com/detector-training:abc --role ROLE_ARN \\
        --instance-type ml.p3.16xlarge --instance-count 2 --input voc=s3://bucket/voc/ \\
        --hp epochs=20 --hp batch_size=16 --checkpoint-s3-uri s3://bucket/ckpt/ --spot --max-wait 200000
    detector-launch deploy --model s3://bucket/.../model.tar.gz --image IMAGE --role ROLE_ARN \\
        --instance-type ml.c5.xlarge [--endpoint-name NAME] [--threshold 0.3]
    detector-launch transform --model s3://bucket/.../model.tar.gz --image IMAGE --role ROLE_ARN \\
        --instance-type ml.c5.xlarge --input s3://bucket/images/ --output s3://bucket/detections/
    detector-launch check-data ./my-data [--hp classes=cat,dog]
    detector-launch evaluate --model s3://bucket/.../model.tar.gz --test s3://bucket/test-data/ \\
        --image IMAGE --role ROLE_ARN --instance-type ml.g5.xlarge [--hp dataset=yolo]
    detector-launch compare last/evaluation.json new/evaluation.json [--output compare.png]
"""

import argparse
import json
import sys

from .deploy import deploy, transform
from .evaluation import compare, evaluate
from .job import JobSpec, LaunchError, check_data, launch, manifest_inputs


def _pairs(items, what):
    result = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise LaunchError("%s %r: expected KEY=VALUE." % (what, item))
        result[key] = value
    return result


def serving_main(command, argv):
    """``deploy`` and ``transform``: the model of a job (its model.tar.gz) on an endpoint, or over
    every image under an S3 prefix."""
    parser = argparse.ArgumentParser(prog="detector-launch " + command, description=(
        "Deploy a trained model to an endpoint." if command == "deploy" else
        "Batch-transform every image under an S3 prefix, one <name>.out of detections per image."))
    parser.add_argument("--model", required=True, help="s3:// URI of the job's model.tar.gz (file:// in local mode)")
    parser.add_argument("--image", required=True, help="the detector-training image that trained it")
    parser.add_argument("--role", required=True, help="execution role ARN")
    parser.add_argument("--instance-type", required=True, help="e.g. ml.c5.xlarge, ml.g5.xlarge, local")
    parser.add_argument("--instance-count", type=int, default=1)
    parser.add_argument("--threshold", type=float, help="default minimum score (serve's default: 0.5)")
    parser.add_argument("--max-detections", type=int, help="default most detections per image (100)")
    if command == "deploy":
        parser.add_argument("--endpoint-name")
    else:
        parser.add_argument("--input", required=True, help="S3 prefix of the images")
        parser.add_argument("--output", required=True, help="S3 prefix for the <image>.out files")
    parser.add_argument("--no-wait", action="store_true", help="return once the request is made")
    args = parser.parse_args(argv)
    common = dict(instance_count=args.instance_count, image_uri=args.image, role=args.role,
                  threshold=args.threshold, max_detections=args.max_detections, wait=not args.no_wait)
    try:
        if command == "deploy":
            predictor = deploy(args.model, args.instance_type, endpoint_name=args.endpoint_name, **common)
            print(json.dumps({"endpoint_name": predictor.endpoint_name}))
        else:
            transformer = transform(args.model, args.input, args.output, args.instance_type, **common)
            print(json.dumps({"transform_job": transformer.latest_transform_job.name, "output": args.output}))
    except LaunchError as exc:
        print("detector-launch %s: %s" % (command, exc), file=sys.stderr)
        return 2
    return 0


def check_data_main(argv):
    """``check-data PATH``: the container's data check of a local folder, before uploading it."""
    parser = argparse.ArgumentParser(prog="detector-launch check-data", description=(
        "Check a local data folder before uploading it: the format found, images and objects "
        "per class and split, what is left out and why, and what would stop the job."))
    parser.add_argument("path", help="a folder of channels (train/, validation/, ...) or one "
                                     "channel's folder")
    parser.add_argument("--channel", help="the channel PATH is (default: found by recognition)")
    parser.add_argument("--hp", action="append", default=[], metavar="KEY=VALUE",
                        help="a hyperparameter of the job (dataset, classes, ...); repeatable")
    args = parser.parse_args(argv)
    try:
        report = check_data(args.path, _pairs(args.hp, "--hp"), args.channel)
    except LaunchError as exc:
        print("detector-launch check-data: %s" % exc, file=sys.stderr)
        return 2
    sys.stdout.write(report.markdown())
    return 0 if report.ok else 1


def _print_job(estimator, waited):
    """The started job as one JSON line (its name; its model's URI when the call waited)."""
    job = estimator.latest_training_job
    print(json.dumps({"job_name": job.name if job else None,
                      "model_data": estimator.model_data if waited else None}))
    return 0


def evaluate_main(argv):
    """``evaluate``: a trained model scored on labelled data, no training (mode=evaluate)."""
    parser = argparse.ArgumentParser(prog="detector-launch evaluate", description=(
        "Score a trained model on labelled data without training: evaluation.json and the "
        "evaluation report in the job's model.tar.gz."))
    parser.add_argument("--model", required=True, help="the model.tar.gz a training job wrote (s3://, or file:// in local mode)")
    parser.add_argument("--test", required=True, help="the labelled data (any format a training job reads)")
    parser.add_argument("--image", required=True, help="the detector-training image")
    parser.add_argument("--role", required=True, help="execution role ARN")
    parser.add_argument("--instance-type", required=True, help="e.g. ml.g5.xlarge, ml.c5.xlarge, local")
    parser.add_argument("--instance-count", type=int, default=1)
    parser.add_argument("--hp", action="append", default=[], metavar="KEY=VALUE",
                        help="a hyperparameter of the data (dataset, classes, val_splits, ...); repeatable")
    parser.add_argument("--output-path", help="where SageMaker writes the job's model.tar.gz")
    parser.add_argument("--no-wait", action="store_true", help="return once the job is created")
    args = parser.parse_args(argv)
    try:
        estimator = evaluate(args.model, args.test, args.image, args.role, args.instance_type,
                             instance_count=args.instance_count, hyperparameters=_pairs(args.hp, "--hp"),
                             wait=not args.no_wait, output_path=args.output_path)
    except LaunchError as exc:
        print("detector-launch evaluate: %s" % exc, file=sys.stderr)
        return 2
    return _print_job(estimator, waited=not args.no_wait)


def compare_main(argv):
    """``compare A B``: two evaluations side by side."""
    parser = argparse.ArgumentParser(prog="detector-launch compare", description=(
        "Print two evaluations (evaluation.json, or the folders holding them) side by side: "
        "mAP and per-class AP, and the difference B - A."))
    parser.add_argument("a", help="the first evaluation.json (or its folder)")
    parser.add_argument("b", help="the second")
    parser.add_argument("--output", help="also draw the comparison into this PNG")
    args = parser.parse_args(argv)
    try:
        compare(args.a, args.b, args.output, labels=(args.a, args.b))
    except LaunchError as exc:
        print("detector-launch compare: %s" % exc, file=sys.stderr)
        return 2
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] == "evaluate":
        return evaluate_main(argv[1:])
    if argv and argv[0] == "compare":
        return compare_main(argv[1:])
    if argv and argv[0] in ("deploy", "transform"):
        return serving_main(argv[0], argv[1:])
    if argv and argv[0] == "check-data":
        return check_data_main(argv[1:])
    parser = argparse.ArgumentParser(description="Start a training job (SageMaker SDK v2); "
                                     "'detector-launch deploy|transform --help' for serving its model, "
                                     "'detector-launch check-data --help' for checking local data.")
    parser.add_argument("--image", required=True, help="image URI (or detector-training:cpu in local mode)")
    parser.add_argument("--role", required=True, help="execution role ARN")
    parser.add_argument("--instance-type", required=True, help="e.g. ml.p3.16xlarge, local, local_gpu")
    parser.add_argument("--instance-count", type=int, default=1)
    parser.add_argument("--input", action="append", default=[], metavar="CHANNEL=URI",
                        help="input channel (voc, coco, train, pretrained, model, config); repeatable")
    parser.add_argument("--manifest", action="append", default=[], metavar="CHANNEL=S3_URI",
                        help="a Ground Truth manifest as a Pipe-mode augmented-manifest channel "
                             "(train, validation), as the built-in algorithm takes it; repeatable")
    parser.add_argument("--label-attribute", help="the manifest's label attribute (with --manifest)")
    parser.add_argument("--without-metadata", action="store_true",
                        help="do not send '<attribute>-metadata' (then --hp classes=... names them)")
    parser.add_argument("--hp", action="append", default=[], metavar="KEY=VALUE", help="hyperparameter; repeatable")
    parser.add_argument("--volume-size", type=int, default=100)
    parser.add_argument("--max-run", type=int, default=5 * 24 * 3600)
    parser.add_argument("--output-path")
    parser.add_argument("--checkpoint-s3-uri")
    parser.add_argument("--tensorboard-s3-uri", help="sync TensorBoard event files here while the job runs")
    parser.add_argument("--spot", action="store_true", help="managed spot training")
    parser.add_argument("--max-wait", type=int)
    parser.add_argument("--tag", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--processes-per-host", type=int)
    parser.add_argument("--no-wait", action="store_true", help="return once the job is created")
    args = parser.parse_args(argv)
    try:
        spec = JobSpec(
            image_uri=args.image, role=args.role, instance_type=args.instance_type,
            instance_count=args.instance_count, hyperparameters=_pairs(args.hp, "--hp"),
            volume_size=args.volume_size, max_run=args.max_run, output_path=args.output_path,
            checkpoint_s3_uri=args.checkpoint_s3_uri, use_spot_instances=args.spot,
            max_wait=args.max_wait, processes_per_host=args.processes_per_host,
            tensorboard_s3_uri=args.tensorboard_s3_uri,
            tags=[{"Key": k, "Value": v} for k, v in _pairs(args.tag, "--tag").items()])
        inputs = _pairs(args.input, "--input")
        if args.manifest:
            inputs.update(manifest_inputs(_pairs(args.manifest, "--manifest"), args.label_attribute,
                                          with_metadata=not args.without_metadata))
        estimator = launch(spec, inputs, wait=not args.no_wait)
    except LaunchError as exc:
        print("detector-launch: %s" % exc, file=sys.stderr)
        return 2
    return _print_job(estimator, waited=not args.no_wait)


if __name__ == "__main__":
    sys.exit(main())
