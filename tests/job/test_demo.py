"""`detector-run` (`make run`) goes through `train`: hyperparameters such as processes_per_host act
as they do in the container."""

import os
import re
import subprocess

from conftest import BIN, ranks_finished


def test_detector_run_with_two_processes_per_host_trains_two_ranks(tmp_path):
    out_dir = tmp_path / "run"
    result = subprocess.run([os.path.join(BIN, "detector-run"), "--output", str(out_dir),
                             "--set", "processes_per_host=2", "--set", "epochs=1",
                             "--set", "val_interval=1"],
                            capture_output=True, text=True, timeout=600,
                            env=dict(os.environ, PYTHONUNBUFFERED="1"))
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-4000:]
    assert re.search(r"job: .*processes_per_host=2 world=2", out), out[-4000:]
    assert ranks_finished(out) == ["0", "1"]
    assert re.search(r"validation: epoch=0 images=48 .*mAP=", out)
    assert "model directory: %s" % (out_dir / "model") in out
    assert {"model.params", "validation.json", "training_curves.png"} <= set(os.listdir(out_dir / "model"))
