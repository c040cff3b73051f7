"""The one atomic-write helper (core/files.py)."""

import os

import pytest
from detector_training.core.files import atomic_save, atomic_write_text, write_json


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    path = str(tmp_path / "config.json")
    write_json(path, {"a": 1})

    def broken(tmp):
        with open(tmp, "w") as handle:
            handle.write('{"half":')
        raise OSError("disk full")

    with pytest.raises(OSError):
        atomic_save(path, broken)
    assert open(path).read() == '{\n "a": 1\n}\n'
    assert os.listdir(tmp_path) == ["config.json"]
    atomic_write_text(path, "new")
    assert open(path).read() == "new" and oct(os.stat(path).st_mode & 0o777) == "0o644"

