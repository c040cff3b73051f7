"""VOC fetch benchmark: our S3 fetch (verify, then extract) against the seed's way and two floors.

The tars are generated once (``make_voc_tars`` padded with random-content ``pad_*.jpg`` files to
``--gb`` GB, sized like the real tars: 2012 holds ~2/3) under ``--cache`` and reused. They are served
by moto's ThreadedMotoServer on 127.0.0.1, run in a child process so that the server and the client
do not share one interpreter lock. Measured in one run, each into a fresh directory:

* ``ours``: ``acquire_voc`` with its defaults: per tar, s3transfer's parallel ranged GETs (8 in
  flight, 8 MB each) into a staging file, hashed as the bytes arrive; a tar is extracted (tarfile,
  the member policy, into a private directory, then moved into place) only once its SHA-1 matched;
  the largest tar first, one download at a time, and the next tar downloads while the previous
  ones are extracted (two side by side).
* ``seed``: per tar, one GetObject to a file, then SHA-1 of the file, then ``extractall``.
* ``floor_network``: the same ranged GETs as ours (same chunk size, same parallelism) to /dev/null.
* ``floor_extract``: ``extractall(filter="data")`` of the same tars from local files, one after the
  other, as the seed extracts. For reference: ``floor_extract_parallel`` (the three side by side).

Ratios: seed/ours (goal > 1: faster than the seed) and ours/max(floor_network, floor_extract)
(goal <= 1.2). Bytes the server sent for a host with 1 rank and with 2 ranks (two threads,
local_size=2) must be equal.

moto answers every ranged GET by materialising the whole object first (O(object) per request, real
S3 is O(range)); ``--moto-ranges fast`` (the default) makes moto keep each object's bytes once, so
a range costs what it sends, and ``--moto-ranges stock`` measures moto unchanged.

Prints the table that benchmarks/README.md keeps; ``--json`` also writes every figure.

Usage: python benchmarks/fetch_benchmark.py [--gb 1.2] [--rounds 3] [--drop-caches] [--runs-dir DIR]
       [--moto-ranges fast|stock] [--connection-mbps 100] [--json out.json]
The machine should be otherwise idle: on 2 cores every variant is CPU-bound.
"""

import argparse
import concurrent.futures
import hashlib
import json
import logging
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import threading
import time
import urllib.request

from detector_training.job.config import from_hyperparameters
from detector_training.core.distributed import World
from detector_training.job.sm_env import Environment, JobPaths
from detector_training.data.generated.synthetic_voc import make_voc_tars
from detector_training.data.acquire.voc_fetch import FetchOptions, acquire_voc

MB = 1e6
BUCKET = "detector-fetch-bench"
PREFIX = "voc/"


# ------------------------------------------------------------------------- the server process

def serve(fast_ranges, connection_mbps=0.0):
    """Child process: ThreadedMotoServer on 127.0.0.1 with a byte counter; prints the port. With
    ``connection_mbps``, every GET body is paced to that many MB/s per connection (real S3 serves
    one connection at roughly 50-100 MB/s, which is what parallel ranged GETs are for)."""
    from moto.moto_server import threaded_moto_server as tms
    from moto.server import ThreadedMotoServer

    if fast_ranges:
        from moto.s3 import models

        original = models.FakeKey.value
        fill = threading.Lock()

        def get(self):
            cached = self.__dict__.get("_bench_value")
            if cached is None or cached[0] is not self._value_buffer or cached[1] != self.contentsize:
                with fill:  # concurrent first GETs read the object once, not once each
                    cached = self.__dict__.get("_bench_value")
                    if cached is None or cached[0] is not self._value_buffer or cached[1] != self.contentsize:
                        cached = (self._value_buffer, self.contentsize, original.fget(self))
                        self.__dict__["_bench_value"] = cached
            return cached[2]

        def set_(self, value):
            self.__dict__.pop("_bench_value", None)
            original.fset(self, value)

        models.FakeKey.value = property(get, set_)

    counter = {"get_bytes": 0, "gets": 0}
    lock = threading.Lock()

    def counting(app):
        def wsgi(environ, start_response):
            path = environ.get("PATH_INFO", "")
            if path == "/__bench__/stats":
                start_response("200 OK", [("Content-Type", "application/json")])
                with lock:
                    return [json.dumps(counter).encode()]
            result = app(environ, start_response)
            if environ.get("REQUEST_METHOD") != "GET":
                return result

            def counted():
                started, sent = time.monotonic(), 0
                try:
                    for whole in result:
                        for offset in range(0, len(whole), 256 << 10):
                            piece = whole[offset:offset + (256 << 10)]
                            with lock:
                                counter["get_bytes"] += len(piece)
                            yield piece
                            sent += len(piece)
                            if connection_mbps:
                                ahead = sent / (connection_mbps * MB) - (time.monotonic() - started)
                                if ahead > 0:
                                    time.sleep(ahead)
                finally:
                    with lock:
                        counter["gets"] += 1
                    if hasattr(result, "close"):
                        result.close()

            return counted()
        return wsgi

    class CountingMotoServer(ThreadedMotoServer):
        def _server_entry(self):
            app = counting(tms.DomainDispatcherApplication(tms.create_backend_app))
            self._server = tms.make_server(self._ip_address, self._port, app, True,
                                           request_handler=tms.MotoRequestHandler)
            self._server_ready_event.set()
            self._server.serve_forever()

    server = CountingMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    print(server.get_host_and_port()[1], flush=True)
    sys.stdin.read()  # until the parent closes the pipe


def start_server(fast_ranges, connection_mbps=0.0):
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--serve",
                             "--moto-ranges", "fast" if fast_ranges else "stock",
                             "--connection-mbps", str(connection_mbps)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    port = int(proc.stdout.readline())
    return proc, "http://127.0.0.1:%d" % port


def process_cpu(pid):
    """User + system CPU seconds of a process (the server) so far."""
    with open("/proc/%d/stat" % pid) as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / float(os.sysconf("SC_CLK_TCK"))


def own_cpu():
    """This process and its finished children (our extraction processes; the server still runs)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


def server_bytes(endpoint):
    with urllib.request.urlopen(endpoint + "/__bench__/stats", timeout=30) as response:
        return json.load(response)["get_bytes"]


# ------------------------------------------------------------------------------- the variants

def seed_way(client, names, sums, dest):
    """One GetObject per tar to a file, then SHA-1 of the file, then extractall."""
    for name in names:
        path = os.path.join(dest, name)
        body = client.get_object(Bucket=BUCKET, Key=PREFIX + name)["Body"]
        with open(path, "wb") as handle:
            shutil.copyfileobj(body, handle, 1 << 20)
        digest = hashlib.sha1()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        assert digest.hexdigest() == sums[name], name
        with tarfile.open(path) as archive:
            archive.extractall(os.path.join(dest, "data"), filter="data")


def floor_network(client, names, sizes, opts):
    """The same ranged GETs as ours (chunk size, workers per tar, one tar at a time), discarded."""
    jobs = [(name, start, min(start + opts.chunk_size, sizes[name]) - 1)
            for name in names for start in range(0, sizes[name], opts.chunk_size)]

    def get(job):
        name, start, end = job
        body = client.get_object(Bucket=BUCKET, Key=PREFIX + name, Range="bytes=%d-%d" % (start, end))["Body"]
        n = 0
        for block in iter(lambda: body.read(1 << 20), b""):
            n += len(block)
        return n

    with concurrent.futures.ThreadPoolExecutor(opts.s3_workers) as pool:
        assert sum(pool.map(get, jobs)) == sum(sizes.values())


def floor_extract(tar_dir, names, dest, parallel=False):
    def one(name):
        with tarfile.open(os.path.join(tar_dir, name)) as archive:
            archive.extractall(os.path.join(dest, name + ".d"), filter="data")

    if parallel:
        with concurrent.futures.ThreadPoolExecutor(len(names)) as pool:
            list(pool.map(one, names))
    else:
        for name in names:
            one(name)


def ours(sums, work_dir, opts, ranks=1):
    """acquire_voc from S3 for a host with ``ranks`` ranks (threads, local_size=ranks)."""
    config = from_hyperparameters({"dataset": "voc", "data_s3_uri": "s3://%s/%s" % (BUCKET, PREFIX),
                                   "data_mirrors": "", "data_checksums": json.dumps(sums)})
    env = Environment(paths=JobPaths(os.path.join(work_dir, "opt_ml")))  # no channel
    results = {}

    def rank(local_rank):
        world = World(rank=local_rank, size=ranks, local_rank=local_rank, local_size=ranks)
        results[local_rank] = acquire_voc(config, env, world, os.path.join(work_dir, "work"), opts)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(ranks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == ranks and len(set(results.values())) == 1, results


# ------------------------------------------------------------------------------------- driver

def build_tars(cache, gb):
    """Generate the padded tars once; reuse them (and their SHA-1s) on later runs."""
    directory = os.path.join(cache, "tars-%.2fgb" % gb)
    manifest = os.path.join(directory, "sha1.json")
    if os.path.isfile(manifest):
        with open(manifest) as handle:
            sums = json.load(handle)
        if all(os.path.isfile(os.path.join(directory, n)) for n in sums):
            return directory, sums
    started = time.perf_counter()
    sums = make_voc_tars(directory, train_2007=300, test_2007=300, train_2012=600, seed=11,
                         pad_bytes=int(gb * 1e9), pad_file_bytes=110_000)
    with open(manifest, "w") as handle:
        json.dump(sums, handle, indent=1)
    print("built %s in %.0f s" % (directory, time.perf_counter() - started), file=sys.stderr)
    return directory, sums


def on_tmpfs(path):
    """Whether ``path`` lies on a tmpfs (its outputs can be deleted between variants at no cost)."""
    path = os.path.realpath(path)
    best, kind = "", ""
    with open("/proc/mounts") as handle:
        for line in handle:
            fields = line.split()
            if len(fields) > 2 and (path == fields[1] or path.startswith(fields[1].rstrip("/") + "/")):
                if len(fields[1]) > len(best):
                    best, kind = fields[1], fields[2]
    return kind == "tmpfs"


def settle(tar_dir, drop_caches):
    """Not timed: write dirty pages out; with drop_caches also empty the page cache, then read the
    local tars back in (floor_extract reads them from memory, as the others read moto's memory)."""
    os.sync()
    if drop_caches:
        try:
            with open("/proc/sys/vm/drop_caches", "w") as handle:
                handle.write("1\n")
        except OSError as exc:
            print("cannot drop caches (%s); continuing without" % exc, file=sys.stderr)
        for name in os.listdir(tar_dir):
            with open(os.path.join(tar_dir, name), "rb") as handle:
                while handle.read(8 << 20):
                    pass
    time.sleep(1.0)


def table(result):
    """The result as the markdown table benchmarks/README.md keeps."""
    rows = (("the seed's way: one GetObject to a file, then SHA-1, then `extractall`", "seed"),
            ("ours: ranged GETs hashed as they arrive, then the policy-checked extraction", "ours"),
            ("floor: the same ranged GETs to /dev/null", "floor_network"),
            ("floor: `extractall(filter=\"data\")` from local files", "floor_extract"))
    lines = ["%s MB, %s" % (result["data"]["total_MB"], result["server"]), "",
             "| path | s | MB/s |", "|---|---|---|"]
    lines += ["| %s | %.2f | %.0f |" % (what, result["seconds"][key], result["MB_per_s"][key])
              for what, key in rows]
    lines += ["", "seed / ours: **%.2f** (goal > 1); ours / larger floor: **%.2f** (goal <= 1.2); "
              "bytes fetched per host with 1 and 2 ranks equal: %s"
              % (result["seed_over_ours"], result["ours_over_max_floor"],
                 result["bytes_fetched_per_host"]["equal"])]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gb", type=float, default=1.2, help="total size of the generated tars")
    parser.add_argument("--cache", default="/tmp/detector-fetch-bench", help="where tars and runs live")
    parser.add_argument("--rounds", type=int, default=3, help="repetitions of every variant (median kept)")
    parser.add_argument("--moto-ranges", choices=("fast", "stock"), default="fast")
    parser.add_argument("--drop-caches", action="store_true",
                        help="empty the page cache before each variant (root; steadier figures)")
    parser.add_argument("--runs-dir", default=None,
                        help="where the variants write (default: under --cache). On a tmpfs such as "
                             "/dev/shm the disk drops out of the figures and outputs are deleted as they go")
    parser.add_argument("--json", default=None, help="also write the result here")
    parser.add_argument("--only", default=None,
                        help="comma-separated variants to run (development; the ratios need all)")
    parser.add_argument("--connection-mbps", type=float, default=0.0,
                        help="pace every GET body to this many MB/s per connection (0: as fast as "
                             "loopback goes); real S3 gives one connection roughly 50-100 MB/s")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return serve(args.moto_ranges == "fast", args.connection_mbps)

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    tar_dir, sums = build_tars(args.cache, args.gb)
    names = sorted(sums)
    sizes = {n: os.path.getsize(os.path.join(tar_dir, n)) for n in names}
    total = sum(sizes.values())
    proc, endpoint = start_server(args.moto_ranges == "fast", args.connection_mbps)
    os.environ.update(AWS_ENDPOINT_URL_S3=endpoint, AWS_ACCESS_KEY_ID="bench", AWS_SECRET_ACCESS_KEY="bench",
                      AWS_DEFAULT_REGION="us-east-1")
    runs = os.path.join(args.runs_dir or args.cache, "detector-fetch-runs-%d" % os.getpid())
    os.makedirs(runs)
    transient = on_tmpfs(runs)
    try:
        import boto3
        from botocore.config import Config

        opts = FetchOptions(progress_s=3600)
        client = boto3.client("s3", config=Config(max_pool_connections=opts.s3_workers + 4))
        client.create_bucket(Bucket=BUCKET)
        started = time.perf_counter()
        for name in names:
            client.upload_file(os.path.join(tar_dir, name), BUCKET, PREFIX + name)
        for name in names:  # the server reads each object once before the timed runs
            client.get_object(Bucket=BUCKET, Key=PREFIX + name, Range="bytes=0-0")["Body"].read()
        print("uploaded %.0f MB to moto in %.0f s" % (total / MB, time.perf_counter() - started), file=sys.stderr)

        variants = {
            "seed": lambda d: seed_way(client, names, sums, d),
            "ours": lambda d: ours(sums, d, opts),
            "floor_network": lambda d: floor_network(client, names, sizes, opts),
            "floor_extract": lambda d: floor_extract(tar_dir, names, d),
            "floor_extract_parallel": lambda d: floor_extract(tar_dir, names, d, parallel=True),
        }
        if args.only:
            variants = {k: v for k, v in variants.items() if k in args.only.split(",")}
        seconds = {name: [] for name in variants}
        cpu = {name: [] for name in variants}
        order = list(variants)
        for round_index in range(args.rounds):
            for name in order[round_index % len(order):] + order[:round_index % len(order)]:
                dest = os.path.join(runs, "%s-%d" % (name, round_index))
                os.makedirs(dest)
                settle(tar_dir, args.drop_caches)
                client_cpu, serving_cpu = own_cpu(), process_cpu(proc.pid)
                began = time.perf_counter()
                variants[name](dest)
                seconds[name].append(time.perf_counter() - began)
                cpu[name].append((own_cpu() - client_cpu, process_cpu(proc.pid) - serving_cpu))
                print("round %d %-28s %6.2f s  (cpu: client %.1f s, server %.1f s)"
                      % (round_index, name, seconds[name][-1], cpu[name][-1][0], cpu[name][-1][1]), file=sys.stderr)
                if transient:
                    shutil.rmtree(dest)

        if args.only:
            print(json.dumps({name: round(statistics.median(v), 3) for name, v in seconds.items()}))
            return 0
        per_host = {}
        for ranks in (1, 2):
            dest = os.path.join(runs, "host-%d-ranks" % ranks)
            os.makedirs(dest)
            settle(tar_dir, args.drop_caches)
            before = server_bytes(endpoint)
            ours(sums, dest, opts, ranks=ranks)
            per_host[ranks] = server_bytes(endpoint) - before
            if transient:
                shutil.rmtree(dest)

        median = {name: statistics.median(values) for name, values in seconds.items()}
        floor = max(median["floor_network"], median["floor_extract"])
        result = {
            "data": {"tars": sizes, "total_bytes": total, "total_MB": round(total / MB, 1)},
            "server": "moto ThreadedMotoServer on 127.0.0.1 (child process), ranges %s, %s per connection"
                      % (args.moto_ranges, "%g MB/s" % args.connection_mbps if args.connection_mbps else "unpaced"),
            "settings": {"chunk_size": opts.chunk_size, "s3_workers_per_tar": opts.s3_workers,
                         "extract_parallelism": opts.extract_parallelism, "rounds": args.rounds,
                         "drop_caches": args.drop_caches, "cpus": os.cpu_count(), "runs_dir": runs,
                         "runs_dir_on_tmpfs": transient},
            "seconds": {k: round(v, 3) for k, v in median.items()},
            "seconds_all_rounds": {k: [round(x, 3) for x in v] for k, v in seconds.items()},
            "MB_per_s": {k: round(total / MB / v, 1) for k, v in median.items()},
            "cpu_seconds_median": {k: {"client": round(statistics.median(c for c, _ in v), 2),
                                       "server": round(statistics.median(s for _, s in v), 2)}
                                   for k, v in cpu.items()},
            "seed_over_ours": round(median["seed"] / median["ours"], 3),
            "ours_over_max_floor": round(median["ours"] / floor, 3),
            "ours_over_max_floor_parallel_extract": round(
                median["ours"] / max(median["floor_network"], median["floor_extract_parallel"]), 3),
            "goals": {"seed_over_ours": "> 1", "ours_over_max_floor": "<= 1.2"},
            "bytes_fetched_per_host": {"1_rank": per_host[1], "2_ranks": per_host[2],
                                       "equal": per_host[1] == per_host[2], "tar_bytes": total},
        }
        print(table(result))
        if args.json:
            with open(args.json, "w") as handle:
                handle.write(json.dumps(result, indent=1) + "\n")
        return 0
    finally:
        proc.stdin.close()
        proc.terminate()
        proc.wait()
        shutil.rmtree(runs, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
