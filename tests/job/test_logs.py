"""Logging (job/logs.py): one stdout line per record, tagged with the rank."""

import logging

import pytest

from detector_training.job.logs import setup_logging


@pytest.fixture(autouse=True)
def root_logger_restored():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    root.handlers[:] = handlers
    root.setLevel(level)


def test_every_line_names_its_rank_and_setup_replaces_the_handlers(capsys):
    setup_logging(rank=3)
    setup_logging(rank=1)  # the rank is known only after Horovod starts: set up again
    logging.getLogger("detector_training").info("hello")
    logging.getLogger("detector_training").debug("hidden")
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].endswith("INFO [rank 1] hello")
    setup_logging(rank=0, verbose=True)
    logging.getLogger("detector_training").debug("shown")
    assert capsys.readouterr().out.rstrip().endswith("DEBUG [rank 0] shown")
