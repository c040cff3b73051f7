"""Build-time smoke check of the image: fails the build when the stack is not what we ship."""

import shutil
import subprocess
import sys


def main():
    import mxnet as mx
    import gluoncv
    import horovod.mxnet as hvd
    import mpi4py  # noqa: F401  (the toolkit's MPI runner)
    import sagemaker_training  # noqa: F401

    import frcnn_train
    from frcnn_train.config import from_hyperparameters
    from frcnn_train.model import build_network

    print("mxnet", mx.__version__, "gluoncv", gluoncv.__version__, "frcnn_train", frcnn_train.__file__)
    assert hvd.mpi_built() and hvd.gloo_built(), "horovod must have MPI and Gloo"
    check = subprocess.run(["horovodrun", "--check-build"], capture_output=True, text=True, check=True)
    print(check.stdout)
    assert "[X] MXNet" in check.stdout, "horovod was built without MXNet"
    subprocess.run([sys.executable, "-m", "pip", "check"], check=True)
    train = open(shutil.which("train")).read()
    assert "frcnn_train.launcher" in train, "`train` on PATH is not the project's entrypoint"
    for network in ("faster_rcnn_resnet50_v1b_voc", "faster_rcnn_resnet18_v1b_voc"):
        config = from_hyperparameters({"network": network})
        net = build_network(config, ("a", "b"), 1, False, None, mx.cpu())
        print("built", network, "with", len(list(net.collect_params().keys())), "parameter arrays")
    print("build check: ok")


if __name__ == "__main__":
    main()
