"""The image's Python (Debian's 3.11.2) has no tarfile extraction filters: the fallback path of
safe_tar must still extract good archives (as root) and refuse bad members on its own."""

import io
import os
import tarfile

import pytest

from frcnn_train import safe_tar


def archive(members, mode="w"):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as tar:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            info.uname, info.gname, info.uid, info.gid = "nobody-here", "nogroup-here", 4242, 4242
            if kind == "file":
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, data
                tar.addfile(info)
    buf.seek(0)
    return buf


@pytest.fixture
def no_filters(monkeypatch):
    monkeypatch.setattr(safe_tar, "HAVE_DATA_FILTER", False)


@pytest.mark.parametrize("mode", ["w", "w:gz"])
def test_fallback_extracts_a_good_archive(no_filters, tmp_path, mode):
    src = archive([("VOCdevkit/VOC2007/JPEGImages/000001.jpg", b"jpeg", "file"),
                   ("VOCdevkit/VOC2007/ImageSets/Main/test.txt", b"000001\n", "file")], mode)
    safe_tar.extract_stream(src, str(tmp_path / "out"))
    path = tmp_path / "out" / "VOCdevkit" / "VOC2007" / "JPEGImages" / "000001.jpg"
    assert path.read_bytes() == b"jpeg"
    assert path.stat().st_uid == os.geteuid()  # the archive's owner (4242) was not applied


@pytest.mark.parametrize("members", [
    [("../evil.txt", b"x", "file")],
    [("/tmp/evil-abs.txt", b"x", "file")],
    [("VOCdevkit/link", "/etc", "symlink")],
])
def test_fallback_refuses_unsafe_members(no_filters, tmp_path, members):
    with pytest.raises(safe_tar.UnsafeMemberError):
        safe_tar.extract_stream(archive(members), str(tmp_path / "out"))
    assert not (tmp_path / "evil.txt").exists()
    assert not os.path.exists("/tmp/evil-abs.txt")
