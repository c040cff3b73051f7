"""Serving benchmark: `serve` in the CPU image, with each runtime, against the best bare loop.

Per family (a tiny model trained with ``export_onnx=true``, so it holds both the MXNet and the
ONNX export) and per runtime (``DETECTOR_RUNTIME=mxnet`` / ``onnxruntime``), in the same image, on
the same cores (``docker run --cpuset-cpus``), the same model and the same JPEG images:

* the bare loops: in-process, per image what a worker does for a request (decode, the family's
  test transform, forward with that runtime, boxes back to pixels: ``inference.decode_image`` +
  ``inference.detect_image``), in two configurations: one process with every core as its threads,
  and one single-threaded process per core, the requests split between them. The best of them
  (lowest p50, highest images/s) is the baseline: the ratios say how close `serve` is to what the
  cores can do with that runtime;
* `serve` at each worker count and 1..N concurrent clients (each client sends its next request
  when the last one was answered; the client runs on the host).

Printed: per family a table (p50/p99 latency, throughput, ratios to the best bare figures of the
same runtime) and ONNX Runtime / MXNet for `serve` at p50 (one client) and best throughput, the
figures ``cpu_runtime`` (families/) is declared by. Goals: p50 at one client within 1.15x of the
best bare p50, best throughput at least 0.9x of the best bare throughput.

Usage: python benchmarks/serving.py [--image detector-training:cpu] [--families ssd,yolo3,...]
       [--runtimes mxnet,onnxruntime] [--cores 0-1] [--workers 1,2] [--concurrency 1,2,4]
       [--requests 60] [--json out.json]
Each family's tiny model is trained first (a minute or two each, on generated data). Mask R-CNN
is not measured by default: its tiny model's scores are near-random and close together, and its
export is refused (NMS keeps other near-equal candidates in ONNX Runtime than in MXNet).
"""

import argparse
import concurrent.futures
import io
import json
import multiprocessing
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
COMMON = {"pretrained_base": "false", "epochs": "1", "batch_size": "2", "num_workers": "0",
          "export_onnx": "true"}
# Each family's network at the sizes a user serves it at (SSD and YOLOv3 at their own squares),
# Faster and Mask R-CNN at short side 256 (their 600 and 800 take seconds per image on two cores).
TINY_JOBS = {
    "faster_rcnn": {"network": "faster_rcnn_resnet18_v1b_voc", "dataset": "custom", "short": "256",
                    "max_size": "352", "train_splits": "2007_trainval"},
    "ssd": {"network": "ssd_512_mobilenet1.0_voc", "dataset": "custom", "short": "512", "max_size": "512",
            "train_splits": "2007_trainval"},
    "yolo3": {"network": "yolo3_mobilenet0.25_voc", "dataset": "custom", "short": "416", "max_size": "416",
              "train_splits": "2007_trainval"},
    "mask_rcnn": {"network": "mask_rcnn_fpn_resnet18_v1b_coco", "dataset": "coco", "short": "256",
                  "max_size": "352", "train_splits": "instances_train2017", "val_splits": "instances_val2017"},
}
RUNTIMES = ("mxnet", "onnxruntime")
N_IMAGES = 8


def train_tiny_model(root, family):
    from detector_training.job.demo import prepare_run_tree

    prepare_run_tree(root, dict(COMMON, **TINY_JOBS[family]), n_train=6, n_test=2, n_train_2012=0, seed=0)
    job = os.path.join(os.path.dirname(sys.executable), "detector-train-job")
    result = subprocess.run([job, "--base-dir", root], capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    model = os.path.join(root, "model")
    assert os.path.isfile(os.path.join(model, "model.onnx")), os.listdir(model)
    return model


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


def _bare_process(model_dir, image_dir, runtime, threads, requests, ready, start, results):
    """One bare process: the model with ``runtime`` on ``threads`` threads, warmed up (then a
    word in ``ready``), then ``requests`` images once ``start`` is set; its latencies into
    ``results``."""
    os.environ["OMP_NUM_THREADS"] = str(threads)
    from detector_training import inference

    threshold, most = inference.DEFAULT_THRESHOLD, inference.DEFAULT_MAX_DETECTIONS  # serve's defaults
    model = inference.load_model(model_dir, runtime=runtime, threads=threads)
    bodies = [open(os.path.join(image_dir, n), "rb").read() for n in sorted(os.listdir(image_dir))]
    for body in bodies * 2:  # warm-up
        inference.detect_image(model, inference.decode_image(io.BytesIO(body)), threshold, most)
    ready.put(os.getpid())
    start.wait()
    latencies = []
    for index in range(requests):
        begin = time.perf_counter()
        inference.detect_image(model, inference.decode_image(io.BytesIO(bodies[index % len(bodies)])),
                               threshold, most)
        latencies.append(time.perf_counter() - begin)
    results.put(latencies)


def bare_loop(model_dir, image_dir, runtime, processes, threads, requests):
    """Inside the image: ``processes`` bare processes of ``threads`` threads each, the requests
    split between them, started together once every one is warm."""
    context = multiprocessing.get_context("spawn")  # MXNet is not fork-safe
    ready, start, results = context.Queue(), context.Event(), context.Queue()
    shares = [requests // processes + (i < requests % processes) for i in range(processes)]
    workers = [context.Process(target=_bare_process, args=(model_dir, image_dir, runtime, threads, share,
                                                           ready, start, results)) for share in shares]
    for worker in workers:
        worker.start()
    for _worker in workers:
        ready.get(timeout=600)
    started = time.perf_counter()
    start.set()
    latencies = [value for _ in workers for value in results.get(timeout=3600)]
    seconds = time.perf_counter() - started
    for worker in workers:
        worker.join()
    print("RESULT " + json.dumps(summary(latencies, seconds)))


def docker(*args, **kwargs):
    return subprocess.run(["docker"] + list(args), capture_output=True, text=True, **kwargs)


def run_bare(image, cores, runtime, processes, threads, model_dir, image_dir, requests):
    result = docker("run", "--rm", "--cpuset-cpus", cores, "-e", "MXNET_CPU_WORKER_NTHREADS=1",
                    "-v", "%s:/opt/ml/model:ro" % model_dir, "-v", "%s:/bench/images:ro" % image_dir,
                    "-v", "%s:/bench/serving.py:ro" % os.path.abspath(__file__), image, "python", "/bench/serving.py",
                    "--bare", "%s,%d,%d" % (runtime, processes, threads), "--requests", str(requests), timeout=3600)
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


def run_serve(image, cores, runtime, workers, model_dir, bodies, concurrencies, requests):
    name = "detector-serving-bench-%s" % uuid.uuid4().hex[:8]
    docker("run", "-d", "--name", name, "--cpuset-cpus", cores, "-p", "127.0.0.1::8080",
           "-e", "SAGEMAKER_MODEL_SERVER_WORKERS=%d" % workers, "-e", "DETECTOR_RUNTIME=%s" % runtime,
           "-v", "%s:/opt/ml/model:ro" % model_dir, image, "serve", check=True, timeout=120)
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
        log = docker("logs", name).stdout
        assert "runtime %s (DETECTOR_RUNTIME=%s)" % (runtime, runtime) in log, log[-2000:]
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
    parser.add_argument("--families", default="faster_rcnn,ssd,yolo3", help="families to measure (of %s)" % ", ".join(TINY_JOBS))
    parser.add_argument("--runtimes", default=",".join(RUNTIMES), help="runtimes to measure")
    parser.add_argument("--cores", default="0-%d" % (min(os.cpu_count(), 4) - 1), help="cpuset of both sides")
    parser.add_argument("--workers", default="1,2", help="worker counts of serve to measure")
    parser.add_argument("--concurrency", default="1,2,4", help="concurrent clients")
    parser.add_argument("--requests", type=int, default=60, help="requests per row")
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--bare", default=None, help=argparse.SUPPRESS)  # inside the image: runtime,processes,threads
    args = parser.parse_args(argv)
    if args.bare:
        runtime, processes, threads = args.bare.split(",")
        return bare_loop("/opt/ml/model", "/bench/images", runtime, int(processes), int(threads), args.requests)
    scratch = tempfile.mkdtemp(prefix="serving-bench-")
    try:
        return measure(args, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def best_bare(rows):
    """The best bare figures: the lowest p50 and the highest images/s of any configuration."""
    return {"p50_ms": min(row["p50_ms"] for row in rows.values()),
            "images_per_s": max(row["images_per_s"] for row in rows.values())}


def measure(args, scratch):
    paths = write_images(os.path.join(scratch, "images"))
    bodies = [open(p, "rb").read() for p in paths]
    cores = cpuset_size(args.cores)
    configurations = [(1, cores)] + ([(cores, 1)] if cores > 1 else [])  # (processes, threads each)
    results = {}
    print("cores %s (%d), %d requests per row, 640x480 JPEGs" % (args.cores, cores, args.requests))
    for family in args.families.split(","):
        model_dir = train_tiny_model(os.path.join(scratch, family), family)
        results[family] = {}
        for runtime in args.runtimes.split(","):
            bare = {"%dx%d" % config: run_bare(args.image, args.cores, runtime, config[0], config[1], model_dir,
                                               os.path.join(scratch, "images"), args.requests)
                    for config in configurations}
            serve = {workers: run_serve(args.image, args.cores, runtime, workers, model_dir, bodies,
                                        [int(c) for c in args.concurrency.split(",")], args.requests)
                     for workers in [int(w) for w in args.workers.split(",")]}
            results[family][runtime] = {"bare": bare, "best_bare": best_bare(bare), "serve": serve}
        print_family(family, TINY_JOBS[family], results[family])
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)
    return 0


def print_family(family, job, by_runtime):
    print("\n%s: %s at short side %s (max %s)" % (family, job["network"], job["short"], job["max_size"]))
    print("| runtime | run | workers | clients | p50 ms | p99 ms | images/s | p50 / best bare | images/s / best bare |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for runtime, result in by_runtime.items():
        best = result["best_bare"]
        for config, row in result["bare"].items():
            processes, threads = config.split("x")
            print("| %s | bare, %s process(es) x %s thread(s) | - | 1 each | %.1f | %.1f | %.2f | %.2f | %.2f |" % (
                runtime, processes, threads, row["p50_ms"], row["p99_ms"], row["images_per_s"],
                row["p50_ms"] / best["p50_ms"], row["images_per_s"] / best["images_per_s"]))
        for workers, rows in result["serve"].items():
            for clients, row in rows.items():
                print("| %s | serve | %d | %d | %.1f | %.1f | %.2f | %.2f | %.2f |" % (
                    runtime, workers, clients, row["p50_ms"], row["p99_ms"], row["images_per_s"],
                    row["p50_ms"] / best["p50_ms"], row["images_per_s"] / best["images_per_s"]))
    for runtime, result in by_runtime.items():
        serve, best = result["serve"], result["best_bare"]
        one = min(rows[min(rows)]["p50_ms"] for rows in serve.values())
        most = max(row["images_per_s"] for rows in serve.values() for row in rows.values())
        result["serve_p50_ms"], result["serve_images_per_s"] = one, most
        print("%s %s: goal p50 at 1 client <= 1.15x best bare: %.2fx; goal best throughput >= 0.9x best bare: %.2fx"
              % (family, runtime, one / best["p50_ms"], most / best["images_per_s"]))
    if set(RUNTIMES) <= set(by_runtime):
        mxnet, onnx = by_runtime["mxnet"], by_runtime["onnxruntime"]
        print("%s serve, ONNX Runtime / MXNet: p50 at 1 client %.2f, best images/s %.2f" % (
            family, onnx["serve_p50_ms"] / mxnet["serve_p50_ms"], onnx["serve_images_per_s"] / mxnet["serve_images_per_s"]))


if __name__ == "__main__":
    sys.exit(main())
