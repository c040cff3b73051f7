"""The failure file (job/failure.py): written once, first writer wins, a clean exit is no failure."""

import logging

import pytest

from detector_training.errors import ConfigError
from detector_training.job.failure import report_failure, write_failure


def test_the_first_writer_wins(tmp_path):
    path = str(tmp_path / "output" / "failure")
    assert write_failure(path, "first") is True
    assert write_failure(path, "second") is False
    assert open(path).read() == "first\n"


def test_a_failure_is_logged_with_its_traceback_and_written_short(tmp_path, caplog):
    path = str(tmp_path / "failure")
    try:
        raise ConfigError("lr=-1: must be positive.", "set lr > 0.")
    except ConfigError as exc:
        with caplog.at_level(logging.ERROR, logger="detector_training"):
            assert report_failure(exc, path) == 1
    assert open(path).read() == "ConfigError: lr=-1: must be positive. Fix: set lr > 0.\n"
    assert "job failed: ConfigError" in caplog.text and "Traceback" in caplog.text


def test_an_unexpected_error_is_an_algorithm_error(tmp_path):
    path = str(tmp_path / "failure")
    assert report_failure(KeyError("x"), path) == 1
    assert open(path).read().startswith("AlgorithmError: KeyError: 'x'.")


@pytest.mark.parametrize("code", [0, None])
def test_a_clean_exit_is_no_failure(tmp_path, code):
    with pytest.raises(SystemExit):
        report_failure(SystemExit(code), str(tmp_path / "failure"))
    assert not (tmp_path / "failure").exists()
    assert report_failure(SystemExit(2), str(tmp_path / "failure")) == 1
