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



def test_one_json_reader_for_untrusted_files_and_json_lines(tmp_path):
    from detector_training.core.files import parse_json, read_json
    from detector_training.errors import ConfigError, DataError

    lines = ['{"source-ref": "s3://b/1.jpg", "box": [1, 2, 3, 4]}', '{"box": [1, 2, 3, Infinity]}']
    assert parse_json(lines[0], "manifest.jsonl line 1")["box"] == [1, 2, 3, 4]
    with pytest.raises(DataError, match="manifest.jsonl line 2 is not valid JSON .*Infinity, which JSON does not allow"):
        parse_json(lines[1], "manifest.jsonl line 2")
    assert isinstance(parse_json("[" * 64 + "]" * 64, "x"), list)  # 64 levels are allowed
    with pytest.raises(DataError, match="nested more than 64 levels"):
        parse_json("[" * 65 + "]" * 65, "x")
    with pytest.raises(ConfigError, match="x is not valid JSON .*utf-8"):
        parse_json(b'"\xff"', "x", error=ConfigError)
    os.mkfifo(str(tmp_path / "fifo.json"))
    with pytest.raises(DataError, match="fifo.json is not a regular file"):
        read_json(str(tmp_path / "fifo.json"), 100)
    (tmp_path / "big.json").write_text("[" + "1," * 100 + "1]")
    with pytest.raises(DataError, match="big.json is larger than the 100 bytes allowed"):
        read_json(str(tmp_path / "big.json"), 100)
    with pytest.raises(DataError, match="cannot read .*missing.json"):
        read_json(str(tmp_path / "missing.json"), 100)
