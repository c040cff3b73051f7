"""Start-up guards: check the machine before the job spends time on it.

Each guard is a pure decision function (tested with plain values) plus a thin reader.
"""

import logging
import os
import resource

from detector_training.errors import EnvironmentCheckError

LOG = logging.getLogger("detector_training")

# Which SageMaker GPU families can run the image: the stock mxnet-cu112 1.9.1 wheel carries GPU
# code for sm_50, 60, 70, 80 and 86 only, and no PTX that a newer GPU could compile. A GPU runs
# code built for its own major version and an equal or lower minor (T4, sm_75, runs the sm_70
# code; L4, sm_89, the sm_86 code); H100/H200 (sm_90) and B200 (sm_100) find none ("no kernel
# image is available"). One table for the start-up guard and the launcher (sagemaker_launch).
# (family, GPU, compute capability)
SUPPORTED_GPU_FAMILIES = (
    ("ml.p3", "V100", "sm_70"), ("ml.p3dn", "V100", "sm_70"), ("ml.g4dn", "T4", "sm_75"),
    ("ml.p4d", "A100", "sm_80"), ("ml.p4de", "A100", "sm_80"), ("ml.g5", "A10G", "sm_86"),
    ("ml.g6", "L4", "sm_89"), ("ml.g6e", "L40S", "sm_89"),
)
UNSUPPORTED_GPU_FAMILIES = (
    ("ml.p5", "H100", "sm_90"), ("ml.p5e", "H200", "sm_90"), ("ml.p5en", "H200", "sm_90"),
    ("ml.p6-b200", "B200", "sm_100"), ("ml.p6e-gb200", "GB200", "sm_100"),
)
WORKING_FAMILIES = ", ".join("%s (%s)" % (f, gpu) for f, gpu, _ in SUPPORTED_GPU_FAMILIES)
FAILING_FAMILIES = ", ".join("%s (%s, %s)" % row for row in UNSUPPORTED_GPU_FAMILIES)


def instance_family(instance_type):
    """'ml.g5.12xlarge' -> 'ml.g5'."""
    return ".".join((instance_type or "").lower().split(".")[:2])


def unsupported_gpu(instance_type):
    """(GPU, compute capability) for an instance family the image cannot run, else None."""
    family = instance_family(instance_type)
    for name, gpu, arch in UNSUPPORTED_GPU_FAMILIES:
        if family == name:
            return gpu, arch
    return None


def gpu_instance(instance_type):
    """True for SageMaker instance families that have GPUs (ml.p*, ml.g*)."""
    name = (instance_type or "").lower()
    return name.startswith(("ml.p", "ml.g"))


def gpu_count():
    """GPUs MXNet can use here (0 with a CPU build of mxnet)."""
    import mxnet as mx

    try:
        return mx.context.num_gpus()
    except Exception:  # CPU build of mxnet
        return 0


def check_gpus_visible(instance_type, gpus):
    if gpu_instance(instance_type) and gpus == 0:
        raise EnvironmentCheckError(
            "instance type %s has GPUs but none is visible to MXNet (a CPU-only mxnet build, or "
            "the container was started without GPU access)." % instance_type,
            "use the GPU image (detector-training:gpu, mxnet-cu112) and, with docker run, pass --gpus all.")


def classify_gpu_error(message):
    """An actionable error for a failed first GPU operation, or None if it is not a known cause."""
    text = str(message)
    if "no kernel image is available" in text or "invalid device function" in text:
        return EnvironmentCheckError(
            "this GPU's architecture is not supported by the installed MXNet build "
            "(mxnet-cu112 1.9.1 has GPU code for sm_50, 60, 70, 80 and 86 only, no PTX).",
            "run on %s; %s cannot run this image." % (WORKING_FAMILIES, FAILING_FAMILIES))
    return None


def check_gpu_runs(ctx):
    """Run one tiny operation on the GPU so an unsupported architecture fails here, clearly."""
    import mxnet as mx

    try:
        (mx.nd.ones((2,), ctx=ctx) * 2).asnumpy()
    except Exception as exc:  # MXNetError
        known = classify_gpu_error(exc)
        if known:
            raise known from exc
        raise


def shm_needed_bytes(num_workers, per_rank_batch, short, max_size, local_ranks):
    """Shared memory the data workers of all ranks on a host may hold at once: each worker
    prefetches about two batches of float32 images of up to short x max_size, plus targets."""
    image = 3 * short * max_size * 4
    return int(local_ranks * num_workers * 2 * per_rank_batch * image * 1.5)


def workers_for_shm(num_workers, shm_free, per_rank_batch, short, max_size, local_ranks):
    """The largest worker count <= num_workers that fits in ``shm_free`` bytes (0: load inline)."""
    workers = num_workers
    while workers > 0 and shm_needed_bytes(workers, per_rank_batch, short, max_size, local_ranks) > shm_free:
        workers -= 1
    return workers


def shm_free_bytes(path="/dev/shm"):
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def adapt_workers(num_workers, per_rank_batch, short, max_size, local_ranks):
    free = shm_free_bytes()
    if free is None or num_workers == 0:
        return num_workers
    workers = workers_for_shm(num_workers, free, per_rank_batch, short, max_size, local_ranks)
    if workers < num_workers:
        LOG.warning(
            "/dev/shm has %.0f MB free, too little for num_workers=%d with %d rank(s) on this host; "
            "using num_workers=%d. Raise it (docker run --shm-size 2g, or local mode's "
            "container_config shm_size) to load data faster.",
            free / 1e6, num_workers, local_ranks, workers)
    return workers


def raise_open_file_limit():
    """Raise the soft open-file limit to the hard limit (data workers share file descriptors;
    a low limit shows up as 'received 0 items of ancdata')."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return hard
    return soft
