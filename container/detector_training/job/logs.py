"""Logging of the launcher and of every rank: one line per record on stdout, tagged with the rank
(SageMaker's metric regexes read rank 0's lines; see job/metrics.py)."""

import logging
import sys


class RankFilter(logging.Filter):
    """Gives every record the ``rank`` attribute the format names."""

    def __init__(self, rank):
        super().__init__()
        self.rank = rank

    def filter(self, record):
        record.rank = self.rank
        return True


def setup_logging(rank=0, verbose=False):
    """Replace the root logger's handlers with one stdout handler tagged ``[rank N]``."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s [rank %(rank)s] %(message)s"))
    handler.addFilter(RankFilter(rank))
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
