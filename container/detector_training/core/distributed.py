"""The one module that knows Horovod.

Everything else receives a :class:`Distributed` value: the world (rank, local rank, size, ...)
and a few operations (broadcast parameters, allgather objects, make a trainer, sum numbers).
A single process is the same code with size 1 and no Horovod import.
"""

import os
from dataclasses import dataclass

# Variables that horovodrun (gloo) or mpirun set in every rank they start.
_LAUNCHER_VARS = ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")


@dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1

    @property
    def is_main(self):
        """Rank 0: the one rank that writes the model directory and the summary logs."""
        return self.rank == 0

    @property
    def is_local_main(self):
        return self.local_rank == 0


def any_rank(dist, flag):
    """Whether ``flag`` is true on any rank (one allreduce: every rank calls it together)."""
    return dist.allreduce_sum([1.0 if flag else 0.0])[0] > 0


def launched_by_horovod(environ=None):
    environ = os.environ if environ is None else environ
    return any(var in environ for var in _LAUNCHER_VARS)


class SingleProcess:
    """Size-1 world: every collective is the identity."""

    def __init__(self):
        self.world = World()

    def broadcast_parameters(self, params):
        return None

    def allgather_object(self, obj, name):
        return [obj]

    def broadcast_object(self, obj, name):
        return obj

    def allreduce_sum(self, values):
        return [float(v) for v in values]

    def barrier(self):
        return None

    def make_trainer(self, params, optimizer, optimizer_params, kvstore):
        import mxnet as mx

        return mx.gluon.Trainer(params, optimizer, optimizer_params, kvstore=kvstore)

    def shutdown(self):
        return None


class Horovod:
    """Horovod world: one rank per device, gradients averaged by allreduce."""

    def __init__(self):
        import horovod.mxnet as hvd

        hvd.init()
        self._hvd = hvd
        self.world = World(rank=hvd.rank(), size=hvd.size(), local_rank=hvd.local_rank(),
                           local_size=hvd.local_size())

    # No Horovod broadcast here. In Horovod 0.28.1 (the last release) EnqueueTensorBroadcast logs
    # the tensor's name after putting the operation on the queue, and that name belongs to the
    # operation, which the background thread may already have completed and freed: a
    # use-after-free that crashed the last rank to enqueue once in the initial parameter broadcast
    # (a segfault in that log line, on 2 busy cores). Allreduce and allgather log only counts, so
    # both broadcasts are made of them: a sum to which every rank but 0 gives zeros is rank 0's
    # value exactly (x + 0 = x; only a -0.0 comes back as 0.0).
    def broadcast_parameters(self, params):
        if self.world.size == 1:
            return
        for name, param in sorted(params.items()):
            data = param.data()
            if not self.world.is_main:
                data[:] = 0
            self._hvd.allreduce_(data, average=False, name="detector.broadcast." + name)

    # Horovod names an object collective after the object's type unless told otherwise; ranks that
    # hold different types (a dict on rank 0, None elsewhere) would then never meet. Always name it.
    def allgather_object(self, obj, name):
        return self._hvd.allgather_object(obj, name="detector." + name)

    def broadcast_object(self, obj, name):
        # Every rank but 0 sends None (a few bytes): rank 0's object is the first of the list.
        return self.allgather_object(obj if self.world.is_main else None, name)[0]

    def allreduce_sum(self, values):
        import mxnet as mx

        tensor = mx.nd.array([float(v) for v in values], dtype="float64")
        summed = self._hvd.allreduce(tensor, average=False, name=None)
        return [float(v) for v in summed.asnumpy()]

    def barrier(self):
        self.allreduce_sum([0.0])

    def make_trainer(self, params, optimizer, optimizer_params, kvstore):
        # kvstore is a single-process setting; Horovod replaces it with allreduce.
        return self._hvd.DistributedTrainer(params, optimizer, optimizer_params)

    def shutdown(self):
        self._hvd.shutdown()


def init_distributed(environ=None):
    """Horovod when a launcher started this process, otherwise a single process."""
    if launched_by_horovod(environ):
        return Horovod()
    return SingleProcess()
