"""Serving benchmark: `serve` in the CPU image against a bare in-process forward loop.

Both run in the same image, on the same cores (``docker run --cpuset-cpus``), the same model and
the same JPEG images. The bare loop is one process doing, per image, what a worker does for a
request: decode, GluonCV's test transform, forward, boxes back to pixels (``inference.decode_image``
+ ``inference.detect_image``, what serve runs), with all the cores as OpenMP threads.
`serve` is measured at each worker count and 1..N concurrent clients (each client sends its
next request when the last one was answered; the client runs on the host).

Printed: p50/p99 latency and throughput per row, and the ratios to the bare loop. Goals: p50 at
concurrency 1 within 1.15x of the bare forward, throughput at the best worker count at least
0.9x of the bare loop.

Usage: python benchmarks/serving.py [--image detector-training:cpu] [--model DIR] [--cores 0-1]
       [--workers 1,2] [--concurrency 1,2,4] [--requests 60] [--json out.json]
Without --model, a tiny Faster R-CNN (ResNet-18, short side 256) is trained first (about a minute).
"""

import argparse
import concurrent.futures
import io
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
TINY_JOB = {"network": "faster_rcnn_resnet18_v1b_voc", "dataset": "custom", "pretrained_base": "false",
            "short": "256", "max_size": "352", "epochs": "1", "batch_size": "2", "num_workers": "0",
            "train_splits": "2007_trainval"}
N_IMAGES = 8


def train_tiny_model(root):
    from detector_training.job.demo import prepare_run_tree

    prepare_run_tree(root, TINY_JOB, n_train=6, n_test=2, n_train_2012=0, seed=0)
    job = os.path.join(os.path.dirname(sys.executable), "detector-train-job")
    subprocess.run([job, "--base-dir", root], check=True, capture_output=True, timeout=900)
    return os.path.join(root, "model")


def write_images(folder):
    """JPEGs of generated shapes at 640 x 480 (a typical camera frame, scaled down by the model)."""
    from PIL import Image

    from detector_training.data.generated.synthetic_voc import make_image

    os.makedirs(folder, exist_ok=True)
    for index in range(N_IMAGES):
        img, _objects = make_image(random.Random(index), ["circle", "square", "triangle"])
        img.resize((640, 480), Image.BILINEAR).save(os.path.join(folder, "%d.jpg" % index), quality=90)
    return sorted(os.path.join(folder, name) for name in os.listdir(folder))


def summary(latencies, seconds):
    ordered = sorted(latencies)
    return {"p50_ms": 1000 * statistics.median(ordered),
            "p99_ms": 1000 * ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))],
            "images_per_s": len(ordered) / seconds}


def bare_loop(model_dir, image_dir, requests):
    """Inside the image: the per-image work of a worker, serially, with every core of the cpuset."""
    from detector_training import inference

    threshold, most = inference.DEFAULT_THRESHOLD, inference.DEFAULT_MAX_DETECTIONS  # serve's defaults
    model = inference.load_model(model_dir)
    bodies = [open(os.path.join(image_dir, n), "rb").read() for n in sorted(os.listdir(image_dir))]
    for body in bodies * 2:  # warm-up
        inference.detect_image(model, inference.decode_image(io.BytesIO(body)), threshold, most)
    latencies, started = [], time.perf_counter()
    for index in range(requests):
        begin = time.perf_counter()
        body = bodies[index % len(bodies)]
        inference.detect_image(model, inference.decode_image(io.BytesIO(body)), threshold, most)
        latencies.append(time.perf_counter() - begin)
    print("RESULT " + json.dumps(summary(latencies, time.perf_counter() - started)))


def docker(*args, **kwargs):
    return subprocess.run(["docker"] + list(args), capture_output=True, text=True, **kwargs)


def run_bare(image, cores, threads, model_dir, image_dir, requests):
    result = docker("run", "--rm", "--cpuset-cpus", cores, "-e", "OMP_NUM_THREADS=%d" % threads,
                    "-e", "MXNET_CPU_WORKER_NTHREADS=1", "-v", "%s:/opt/ml/model:ro" % model_dir,
                    "-v", "%s:/bench/images:ro" % image_dir, "-v", "%s:/bench/serving.py:ro" % os.path.abspath(__file__),
                    image, "python", "/bench/serving.py", "--bare", "--requests", str(requests), timeout=1800)
    lines = [l for l in result.stdout.splitlines() if l.startswith("RESULT ")]
    assert lines, result.stdout[-2000:] + result.stderr[-2000:]
    return json.loads(lines[-1][len("RESULT "):])


def post(url, body):
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "image/jpeg"})
    begin = time.perf_counter()
    with urllib.request.urlopen(request, timeout=120) as answer:
        answer.read()
        assert answer.status == 200
    return time.perf_counter() - begin


def run_serve(image, cores, workers, model_dir, bodies, concurrencies, requests):
    name = "detector-serving-bench-%s" % uuid.uuid4().hex[:8]
    docker("run", "-d", "--name", name, "--cpuset-cpus", cores, "-p", "127.0.0.1::8080",
           "-e", "SAGEMAKER_MODEL_SERVER_WORKERS=%d" % workers, "-v", "%s:/opt/ml/model:ro" % model_dir,
           image, "serve", check=True, timeout=120)
    rows = {}
    try:
        url = "http://" + docker("port", name, "8080/tcp", check=True).stdout.split()[0]
        deadline = time.time() + 240
        while True:
            try:
                with urllib.request.urlopen(url + "/ping", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            assert time.time() < deadline, docker("logs", name).stdout[-2000:]
            time.sleep(0.5)
        for body in bodies * 2 * workers:  # every worker warm
            post(url + "/invocations", body)
        for clients in concurrencies:
            with concurrent.futures.ThreadPoolExecutor(clients) as pool:
                started = time.perf_counter()
                latencies = list(pool.map(lambda i: post(url + "/invocations", bodies[i % len(bodies)]),
                                          range(requests)))
                rows[clients] = summary(latencies, time.perf_counter() - started)
    finally:
        docker("rm", "-f", name, timeout=120)
    return rows


def cpuset_size(cores):
    count = 0
    for part in cores.split(","):
        low, _, high = part.partition("-")
        count += int(high or low) - int(low) + 1
    return count


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", default="detector-training:cpu")
    parser.add_argument("--model", default=None, help="a model directory (default: train a tiny one)")
    parser.add_argument("--cores", default="0-%d" % (min(os.cpu_count(), 4) - 1), help="cpuset of both sides")
    parser.add_argument("--workers", default="1,2", help="worker counts of serve to measure")
    parser.add_argument("--concurrency", default="1,2,4", help="concurrent clients")
    parser.add_argument("--requests", type=int, default=60, help="requests per row")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)  # inside the image
    args = parser.parse_args(argv)
    if args.bare:
        return bare_loop("/opt/ml/model", "/bench/images", args.requests)
    scratch = tempfile.mkdtemp(prefix="serving-bench-")
    try:
        return measure(args, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def measure(args, scratch):
    model_dir = os.path.abspath(args.model) if args.model else train_tiny_model(os.path.join(scratch, "job"))
    paths = write_images(os.path.join(scratch, "images"))
    bodies = [open(p, "rb").read() for p in paths]
    cores = cpuset_size(args.cores)
    bare = run_bare(args.image, args.cores, cores, model_dir, os.path.join(scratch, "images"), args.requests)
    results = {"bare": bare, "serve": {}}
    for workers in [int(w) for w in args.workers.split(",")]:
        results["serve"][workers] = run_serve(args.image, args.cores, workers, model_dir, bodies,
                                              [int(c) for c in args.concurrency.split(",")], args.requests)
    print("cores %s (%d), model %s, %d requests per row, 640x480 JPEGs" % (args.cores, cores, model_dir,
                                                                         args.requests))
    print("| run | workers | clients | p50 ms | p99 ms | images/s | p50 / bare | images/s / bare |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    print("| bare loop | - | 1 | %.1f | %.1f | %.2f | 1.00 | 1.00 |" % (bare["p50_ms"], bare["p99_ms"], bare["images_per_s"]))
    for workers, rows in results["serve"].items():
        for clients, row in rows.items():
            print("| serve | %d | %d | %.1f | %.1f | %.2f | %.2f | %.2f |" % (
                workers, clients, row["p50_ms"], row["p99_ms"], row["images_per_s"],
                row["p50_ms"] / bare["p50_ms"], row["images_per_s"] / bare["images_per_s"]))
    first = results["serve"][min(results["serve"])][min(results["serve"][min(results["serve"])])]
    best = max(row["images_per_s"] for rows in results["serve"].values() for row in rows.values())
    print("goal p50 at 1 client <= 1.15x bare: %.2fx; goal best throughput >= 0.9x bare: %.2fx"
          % (first["p50_ms"] / bare["p50_ms"], best / bare["images_per_s"]))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
