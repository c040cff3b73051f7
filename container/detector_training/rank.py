"""One rank started by mpirun: ``python -m detector_training.rank`` (see job/launcher.py).

It exits with ``os._exit`` so a failed rank never lingers in interpreter shutdown (Horovod's
background thread); mpirun then ends the other ranks (orte_abort_on_non_zero_status).
"""

import os
import sys

from detector_training.main import job_main


def main():
    code = job_main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
