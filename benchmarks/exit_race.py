"""The exit race of issue 27 at scale: many short `train` jobs with num_workers=4, two at a time
beside a CPU-bound process; every one must exit by itself (not through the exit guard) within 60 s
of logging `finished:`. The suite runs 8 (tests/end_to_end/test_job_exit.py); this runs 50.

Prints how many exited in time and the seconds from `finished:` to exit (median, max); exits
non-zero and prints where a stuck job waited (py-spy) when one did not.

Usage: python benchmarks/exit_race.py [--jobs 50] [--parallel 2]
"""

import argparse
import os
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [os.path.join(ROOT, "tests"), os.path.join(ROOT, "tests", "end_to_end")]

from exit_race import EXIT_BOUND_S, run_jobs  # noqa: E402 (after the path)


def report(n, problem, seconds):
    print("job %d: %s" % (n, "PROBLEM" if problem else "exited %.2f s after finished:" % seconds),
          flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--parallel", type=int, default=2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="exit-race-") as root:
        problems, took = run_jobs(root, args.jobs, args.parallel, progress=report)
    print("| jobs | exited within %d s of `finished:` | seconds to exit: median | max |"
          % EXIT_BOUND_S)
    print("|---|---|---|---|")
    print("| %d | %d | %.2f | %.2f |" % (args.jobs, len(took),
                                         statistics.median(took) if took else float("nan"),
                                         max(took) if took else float("nan")))
    for n, problem in sorted(problems.items()):
        print("\njob %d: %s" % (n, problem))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
