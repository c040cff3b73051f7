"""detector-launch: start a training job from the command line.

    detector-launch --image 123.dkr.ecr.us-east-1.amazonaws.com/detector-training:abc --role ROLE_ARN \\
        --instance-type ml.p3.16xlarge --instance-count 2 --input voc=s3://bucket/voc/ \\
        --hp epochs=20 --hp batch_size=16 --checkpoint-s3-uri s3://bucket/ckpt/ --spot --max-wait 200000
"""

import argparse
import json
import sys

from .job import JobSpec, LaunchError, launch


def _pairs(items, what):
    result = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise LaunchError("%s %r: expected KEY=VALUE." % (what, item))
        result[key] = value
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description="Start a Faster R-CNN training job (SageMaker SDK v2).")
    parser.add_argument("--image", required=True, help="image URI (or detector-training:cpu in local mode)")
    parser.add_argument("--role", required=True, help="execution role ARN")
    parser.add_argument("--instance-type", required=True, help="e.g. ml.p3.16xlarge, local, local_gpu")
    parser.add_argument("--instance-count", type=int, default=1)
    parser.add_argument("--input", action="append", default=[], metavar="CHANNEL=URI",
                        help="input channel (voc, coco, train, pretrained, model, config); repeatable")
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
        estimator = launch(spec, _pairs(args.input, "--input"), wait=not args.no_wait)
    except LaunchError as exc:
        print("detector-launch: %s" % exc, file=sys.stderr)
        return 2
    job = estimator.latest_training_job
    print(json.dumps({"job_name": job.name if job else None,
                      "model_data": estimator.model_data if not args.no_wait else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
