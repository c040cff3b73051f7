"""safe_tar's own stream reader: what it writes must match what tarfile's data filter would
write, for every header format tarfile produces, from a file object, a file descriptor and a pipe
(bodies moved by splice); bad streams fail with tarfile errors that say what was wrong."""

import errno
import io
import os
import stat
import subprocess
import sys
import tarfile
import threading

import pytest

from frcnn_train import safe_tar

LONG_DIR = "VOCdevkit/VOC2012/" + "d" * 90 + "/" + "e" * 40  # > 100 characters: needs an extension


def build(members, fmt=tarfile.PAX_FORMAT, compression=""):
    """A tar in memory from (name, kind, payload, mode) tuples."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w" + (":" + compression if compression else ""), format=fmt) as tar:
        for name, kind, payload, mode in members:
            info = tarfile.TarInfo(name)
            info.mtime = 1_600_000_000
            info.uid, info.gid, info.uname, info.gname = 4242, 4242, "someone", "somegroup"
            if mode is not None:
                info.mode = mode
            if kind == "file":
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, payload
                tar.addfile(info)
            elif kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, payload
                tar.addfile(info)
            else:
                info.type = kind
                tar.addfile(info)
    return buf.getvalue()


GOOD = [
    ("VOCdevkit", "dir", None, 0o755),
    ("VOCdevkit/VOC2007/JPEGImages/000001.jpg", "file", os.urandom(70_000), 0o644),
    ("VOCdevkit/VOC2007/ImageSets/Main/test.txt", "file", b"000001\n", 0o4777),  # setuid dropped
    ("VOCdevkit/run.sh", "file", b"#!/bin/sh\n", 0o700),
    ("VOCdevkit/private.txt", "file", b"secret", 0o400),  # gains owner write, as the data filter does
    ("VOCdevkit/empty.txt", "file", b"", 0o644),
    (LONG_DIR + "/" + "f" * 120 + ".xml", "file", b"<annotation/>" * 100, 0o644),
    ("VOCdevkit/VOC2007/same.jpg", "hardlink", "VOCdevkit/VOC2007/JPEGImages/000001.jpg", None),
    ("VOCdevkit/VOC2007/alias", "symlink", "JPEGImages/000001.jpg", None),
    ("VOCdevkit/VOC2007/after_link.txt", "file", b"after", 0o644),
]


def expected_tree(data, tmp_path):
    """What tarfile's data filter extracts from ``data``: the reference."""
    ref = tmp_path / "reference"
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(ref, filter="data")
    return snapshot(ref)


def snapshot(root):
    tree = {}
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(base, name)
            rel = os.path.relpath(path, root)
            info = os.lstat(path)
            if stat.S_ISLNK(info.st_mode):
                tree[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(info.st_mode):
                tree[rel] = ("dir",)
            else:
                with open(path, "rb") as handle:
                    tree[rel] = ("file", handle.read(), stat.S_IMODE(info.st_mode), int(info.st_mtime))
    return tree


def pipe_of(data):
    """A pipe read end with ``data`` written into it by a thread."""
    read_fd, write_fd = os.pipe()

    def write():
        with os.fdopen(write_fd, "wb") as handle:
            try:
                handle.write(data)
            except BrokenPipeError:
                pass

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    return read_fd, thread


needs_filters = pytest.mark.skipif(not safe_tar.HAVE_DATA_FILTER, reason="the reference is tarfile's data filter")


@needs_filters
@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT, tarfile.USTAR_FORMAT])
@pytest.mark.parametrize("how", ["fileobj", "fd", "pipe", "pipe_without_splice"])
def test_extracts_what_the_data_filter_would(tmp_path, monkeypatch, fmt, how):
    spliced = []
    real_splice = getattr(os, "splice", None)

    def splice(src, dst, count, *args):
        if how == "pipe_without_splice":  # a filesystem that cannot take spliced pages
            raise OSError(errno.EINVAL, "Invalid argument")
        moved = real_splice(src, dst, count, *args)
        spliced.append(moved)
        return moved

    if real_splice is not None:
        monkeypatch.setattr(os, "splice", splice)
    members = GOOD if fmt != tarfile.USTAR_FORMAT else [m for m in GOOD if not m[0].startswith(LONG_DIR)]
    data = build(members, fmt)
    dest = tmp_path / "ours"
    if how == "fileobj":
        stats = safe_tar.extract_stream(io.BytesIO(data), str(dest))
    elif how == "fd":
        (tmp_path / "a.tar").write_bytes(data)
        fd = os.open(str(tmp_path / "a.tar"), os.O_RDONLY)
        try:
            stats = safe_tar.extract_fd(fd, str(dest))
        finally:
            os.close(fd)
    else:  # pipe, pipe_without_splice
        fd, writer = pipe_of(data)
        try:
            stats = safe_tar.extract_fd(fd, str(dest))
            while os.read(fd, 1 << 16):
                pass
        finally:
            os.close(fd)
            writer.join()
    assert snapshot(dest) == expected_tree(data, tmp_path)
    if how == "pipe" and real_splice is not None:  # the bodies moved kernel to kernel
        assert sum(spliced) == sum(len(m[2]) for m in members if m[1] == "file")
    else:
        assert not spliced
    files = [m for m in members if m[1] == "file"]
    assert stats.files == len(files) and stats.bytes == sum(len(m[2]) for m in files)
    mode = stat.S_IMODE(os.stat(dest / "VOCdevkit/VOC2007/ImageSets/Main/test.txt").st_mode)
    assert not mode & (stat.S_ISUID | stat.S_ISGID) and os.stat(dest / "VOCdevkit/run.sh").st_mode & 0o100


def test_a_gzip_stream_is_extracted_with_the_same_checks(tmp_path):
    data = build([("VOCdevkit/a.txt", "file", b"a" * 5000, 0o644)], compression="gz")
    stats = safe_tar.extract_stream(io.BytesIO(data), str(tmp_path / "out"))
    assert (tmp_path / "out/VOCdevkit/a.txt").read_bytes() == b"a" * 5000 and stats.files == 1
    evil = build([("../escaped.txt", "file", b"x", 0o644)], compression="gz")
    with pytest.raises(safe_tar.UnsafeMemberError):
        safe_tar.extract_stream(io.BytesIO(evil), str(tmp_path / "out2"))
    assert not (tmp_path / "escaped.txt").exists()


@pytest.mark.parametrize("data,message", [
    (b"", "empty file"),
    (b"<html><body>502 Bad Gateway</body></html>" + b" " * 600, "not a tar archive"),
])
def test_a_stream_that_is_not_a_tar_says_so(tmp_path, data, message):
    with pytest.raises(tarfile.ReadError, match=message):
        safe_tar.extract_stream(io.BytesIO(data), str(tmp_path / "out"))


def test_a_truncated_tar_fails_and_keeps_the_complete_members(tmp_path):
    data = build([("VOCdevkit/a.bin", "file", b"a" * 3000, 0o644), ("VOCdevkit/b.bin", "file", b"b" * 9000, 0o644)])
    cut = data.index(b"b" * 512) + 1000  # in the middle of the second body
    with pytest.raises(tarfile.ReadError, match="unexpected end of data"):
        safe_tar.extract_stream(io.BytesIO(data[:cut]), str(tmp_path / "out"))
    assert (tmp_path / "out/VOCdevkit/a.bin").read_bytes() == b"a" * 3000


def test_a_corrupt_header_after_the_first_is_an_invalid_header(tmp_path):
    data = bytearray(build([("VOCdevkit/a.txt", "file", b"a", 0o644), ("VOCdevkit/b.txt", "file", b"b", 0o644)]))
    data[1024 + 150] ^= 0x55  # the second header's checksum field no longer matches
    with pytest.raises(tarfile.ReadError, match="invalid header"):
        safe_tar.extract_stream(io.BytesIO(bytes(data)), str(tmp_path / "out"))


def patched_header(data, offset, field, value):
    """``data`` with one header field (offset within the header, bytes) replaced, checksum redone."""
    data = bytearray(data)
    start, width = field
    data[offset + start:offset + start + width] = value
    data[offset + 148:offset + 156] = b" " * 8
    checksum = sum(data[offset:offset + 512])
    data[offset + 148:offset + 156] = b"%06o\x00 " % checksum
    return bytes(data)


@pytest.mark.parametrize("size_field,message", [(b"\xff" * 12, "negative size"),
                                                (b"\x80" + b"\x00" * 8 + b"\x01\x00\x00", "unexpected end of data")])
def test_a_member_size_that_is_negative_or_beyond_the_stream_fails_cleanly(tmp_path, size_field, message):
    data = build([("VOCdevkit/a.txt", "file", b"abc", 0o644)], fmt=tarfile.GNU_FORMAT)
    bad = patched_header(data, 0, (124, 12), size_field)  # base-256: -1, then 65,536 bytes of 512
    with pytest.raises(tarfile.ReadError, match=message):
        safe_tar.extract_stream(io.BytesIO(bad[:1024]), str(tmp_path / "out"))


def test_a_modification_time_the_filesystem_cannot_hold_is_left_alone(tmp_path):
    data = build([("VOCdevkit/a.txt", "file", b"abc", 0o644)], fmt=tarfile.GNU_FORMAT)
    huge = patched_header(data, 0, (136, 12), b"\x80" + b"\x7f" * 11)  # year ~10^25
    safe_tar.extract_stream(io.BytesIO(huge), str(tmp_path / "out"))
    assert (tmp_path / "out/VOCdevkit/a.txt").read_bytes() == b"abc"


@pytest.mark.parametrize("kind", [tarfile.GNUTYPE_SPARSE, b"V", tarfile.CHRTYPE, tarfile.FIFOTYPE])
def test_special_and_unsupported_members_are_refused_by_name(tmp_path, kind):
    data = build([("VOCdevkit/ok.txt", "file", b"ok", 0o644), ("VOCdevkit/odd", kind, None, 0o644),
                  ("VOCdevkit/later.txt", "file", b"later", 0o644)], fmt=tarfile.GNU_FORMAT)
    with pytest.raises(safe_tar.UnsafeMemberError) as caught:
        safe_tar.extract_stream(io.BytesIO(data), str(tmp_path / "out"))
    assert caught.value.member == "VOCdevkit/odd"
    assert not (tmp_path / "out/VOCdevkit/later.txt").exists()  # nothing after the refused member


def test_a_file_replacing_an_extracted_symlink_does_not_write_through_it(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"untouched")
    data = build([("VOCdevkit/link", "symlink", "target.txt", None),
                  ("VOCdevkit/target.txt", "file", b"inside", 0o644),
                  ("VOCdevkit/link", "file", b"replaced", 0o644)])
    safe_tar.extract_stream(io.BytesIO(data), str(tmp_path / "out"))
    assert (tmp_path / "out/VOCdevkit/link").read_bytes() == b"replaced"
    assert not (tmp_path / "out/VOCdevkit/link").is_symlink()
    assert (tmp_path / "out/VOCdevkit/target.txt").read_bytes() == b"inside"
    assert outside.read_bytes() == b"untouched"


def test_a_link_through_a_symlink_out_of_the_tree_is_refused(tmp_path):
    data = build([("VOCdevkit/up", "symlink", "..", None),
                  ("VOCdevkit/up2", "symlink", "up/..", None)])
    with pytest.raises(safe_tar.UnsafeMemberError) as caught:
        safe_tar.extract_stream(io.BytesIO(data), str(tmp_path / "out"))
    assert caught.value.member == "VOCdevkit/up2"


def test_the_child_process_extracts_a_pipe_and_reports_json(tmp_path):
    data = build([m for m in GOOD if m[1] == "file"])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.run([sys.executable, "-m", "frcnn_train.safe_tar", str(tmp_path / "out")], input=data,
                          capture_output=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    files = [m for m in GOOD if m[1] == "file"]
    assert b'"ok": true' in proc.stdout and (b'"files": %d' % len(files)) in proc.stdout
    assert (tmp_path / "out/VOCdevkit/VOC2007/JPEGImages/000001.jpg").read_bytes() == GOOD[1][2]
    bad = subprocess.run([sys.executable, "-m", "frcnn_train.safe_tar", str(tmp_path / "out2")],
                         input=build([("/etc/evil", "file", b"x", 0o644)]), capture_output=True, env=env, timeout=60)
    assert bad.returncode == 3 and b'"unsafe": "/etc/evil"' in bad.stdout
