"""Whole jobs with early stopping and another optimizer: a job whose validation objective stops
improving ends early, as a success, with the best model and the reason written."""

import json
import os
import re

from conftest import run_horovod_job


def read_json(*parts):
    with open(os.path.join(*parts)) as handle:
        return json.load(handle)


def test_a_job_whose_objective_stops_improving_ends_early_with_the_best_model(job_dir):
    from conftest import make_job

    # lr 1e-9 under Adam: nothing learns, so no epoch beats the first by the tolerance asked.
    base = make_job(job_dir, {"epochs": "5", "batch_size": "2", "lr": "1e-9", "optimizer": "adam",
                              "early_stopping": "True", "early_stopping_min_epochs": "2",
                              "early_stopping_patience": "1", "early_stopping_tolerance": "0.5"},
                    n_train=4, n_test=2)
    result, out = run_horovod_job(base)
    assert result.returncode == 0, out[-4000:]
    assert not os.path.exists(os.path.join(base, "output", "failure"))
    # both ranks end after epoch 1 of 0..4, and say why
    assert sorted(re.findall(r"\[rank (\d)\] finished early: rank=\d steps=\d+ epochs=0\.\.1 of 5", out)) \
        == ["0", "1"]
    assert re.search(r"\[rank 0\] early stopping: after epoch 1: mAP did not improve by more than 0\.5 "
                     r"\(relative\) in the 1 epochs after epoch 0", out)
    assert "[Epoch 2]" not in out
    # the tuning objective is still in the log, once per validated epoch
    assert len(re.findall(r"validation: epoch=\d images=2 time=\S+ mAP=[0-9.]+", out)) == 2
    model = os.path.join(base, "model")
    stopped = read_json(model, "stopped.json")
    assert (stopped["epoch"], stopped["best_epoch"], stopped["objective"]) == (1, 0, "mAP")
    assert (stopped["patience"], stopped["min_epochs"], stopped["tolerance"]) == (1, 2, 0.5)
    assert [h["epoch"] for h in read_json(model, "history.json")] == [0, 1]
    # the model is the best epoch's: its parameters, its validation
    assert read_json(model, "validation.json") == read_json(model, "validation-best.json")
    assert read_json(model, "validation.json")["epoch"] == 0
    import mxnet as mx

    final, best = (mx.nd.load(os.path.join(model, n)) for n in ("model.params", "model-best.params"))
    assert final.keys() == best.keys()
    assert all((final[k] == best[k]).asnumpy().all() for k in final)
    for name in ("model-symbol.json", "model-0000.params", "classes.json", "config.json"):
        assert os.path.isfile(os.path.join(model, name)), name
    assert read_json(model, "config.json")["optimizer"] == "adam"
