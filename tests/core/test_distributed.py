"""The Horovod collectives the job uses, with two real ranks (horovodrun --gloo on this host)."""

import ast
import inspect
import json
import os
import subprocess

from conftest import BIN
from detector_training.core import distributed
from detector_training.core.distributed import SingleProcess, launched_by_horovod

PROBE = r"""
import json, sys
import mxnet as mx
from detector_training.core.distributed import Horovod

dist = Horovod()
rank = dist.world.rank
params = mx.gluon.ParameterDict("probe_")
shapes = {"weight": (3, 4), "bias": (5,), "count": (2,)}
for name, shape in shapes.items():
    dtype = "int32" if name == "count" else "float32"
    params.get(name, shape=shape, dtype=dtype, init=mx.init.Constant(0)).initialize(ctx=mx.cpu())
    # Every rank holds other values; rank 0's must win, exactly.
    values = mx.nd.arange(1, 1 + int(mx.nd.prod(mx.nd.array(shape)).asscalar())).reshape(shape)
    params["probe_" + name].set_data((values * (rank + 1) * (-1.5 if dtype == "float32" else 7))
                                     .astype(dtype))
dist.broadcast_parameters(params)
state = {"epoch": 3, "path": "ckpt-00000042"} if rank == 0 else None
report = {
    "rank": rank,
    "params": {k: p.data().asnumpy().tolist() for k, p in sorted(params.items())},
    "object": dist.broadcast_object(state, "resume"),
    "gathered": dist.allgather_object({"rank": rank}, "probe"),
    "sum": dist.allreduce_sum([rank + 1, 0.5]),
}
print("REPORT " + json.dumps(report), flush=True)
"""


def run_two_ranks(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    cmd = [os.path.join(BIN, "horovodrun"), "-np", "2", "--gloo", "-H", "localhost:2",
           os.path.join(BIN, "python"), str(script)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    reports = [json.loads(line.split("REPORT ", 1)[1]) for line in result.stdout.splitlines()
               if "REPORT " in line]
    return sorted(reports, key=lambda r: r["rank"])


def test_both_ranks_end_with_rank_0s_parameters_and_objects(tmp_path):
    first, second = run_two_ranks(tmp_path)
    assert [first["rank"], second["rank"]] == [0, 1]
    # Rank 0's values (rank factor 1), bit for bit, on both ranks: floats and integers.
    assert first["params"]["probe_bias"] == [-1.5, -3.0, -4.5, -6.0, -7.5]
    assert first["params"]["probe_count"] == [7, 14]
    assert second["params"] == first["params"]
    assert first["object"] == second["object"] == {"epoch": 3, "path": "ckpt-00000042"}
    assert first["gathered"] == second["gathered"] == [{"rank": 0}, {"rank": 1}]
    assert first["sum"] == second["sum"] == [3.0, 1.0]


def test_no_collective_goes_through_horovods_broadcast():
    # Horovod 0.28.1's broadcast reads its operation's name after the operation may have been
    # freed (see core/distributed.py); the job's broadcasts are made of allreduce and allgather.
    tree = ast.parse(inspect.getsource(distributed))
    called = {node.func.attr for node in ast.walk(tree)
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "_hvd"}
    assert called and not {name for name in called if "broadcast" in name}, called


def test_horovod_is_detected_from_the_launcher_variables_only():
    assert not launched_by_horovod({})
    # horovodrun (Gloo) sets HOROVOD_RANK, mpirun OMPI_COMM_WORLD_RANK (Open MPI) or PMI_RANK (MPICH):
    # each alone must be enough.
    for var in ("HOROVOD_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        assert launched_by_horovod({var: "0"}), var
    assert not launched_by_horovod({"PATH": "/usr/bin", "RANK": "0"})  # not a launcher's
    single = SingleProcess()
    assert single.allgather_object({"a": 1}, "x") == [{"a": 1}] and single.allreduce_sum([1, 2]) == [1.0, 2.0]
