"""One name for the product: nothing the repository ships says 'frcnn' (its first detector), except
the module that still reads the old FRCNN_* environment variables for one release."""

import os
import re
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALLOWED = {"container/detector_training/settings.py",  # reads FRCNN_* for one release
           "container/detector_training/job/launcher.py",  # forwards FRCNN_* to the ranks meanwhile
           "tests/job/test_sm_env.py",  # checks that the old names still work
           "tests/test_settings.py",  # checks that the old names are read, with a warning
           "docs/environment.md",  # tells users the old names are read for one release
           "tests/test_one_name.py"}


def test_no_file_names_the_first_detector_instead_of_the_product():
    files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    found = []
    for path in files:
        if path in ALLOWED or not os.path.isfile(os.path.join(ROOT, path)):
            continue
        with open(os.path.join(ROOT, path), "rb") as handle:
            text = handle.read().decode("utf-8", "replace")
        found += ["%s:%d" % (path, text[:m.start()].count("\n") + 1)
                  for m in re.finditer(r"frcnn", text, re.IGNORECASE)]
    assert not found, "still named after the first detector: %s" % ", ".join(found[:20])
