"""Extraction of untrusted tars: the member policy, tarfile's filter behind it, and an adversarial
suite that asserts nothing outside the target changes.

Every extraction test runs with both tarfile implementations the product uses: the stdlib's (this
Python has extraction filters) and ``backports.tarfile`` (what the image's Debian Python 3.11.2 uses).
"""

import gzip
import io
import os
import stat
import tarfile
import threading
import time

import pytest

from detector_training.core import archive
from detector_training.core.archive import Limits, UnreadableArchive, UnsafeArchive, member_problem


@pytest.fixture(params=["stdlib", "backports"])
def tarmod(request):
    if request.param == "stdlib":
        assert hasattr(tarfile, "data_filter"), "this Python is expected to have extraction filters"
        return tarfile
    from backports import tarfile as backport

    return backport


def make_tar(members, fmt=tarfile.GNU_FORMAT, compression=""):
    """members: (name, data or None for a directory, {TarInfo attributes})."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w" + (":" + compression if compression else ""), format=fmt) as out:
        for name, data, attrs in members:
            info = tarfile.TarInfo(name)
            info.mtime = 1_600_000_000
            if data is None and "type" not in attrs:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
            else:
                info.size = len(data or b"")
            for key, value in attrs.items():
                setattr(info, key, value)
            out.addfile(info, io.BytesIO(data) if info.isreg() and data else None)
    return buffer.getvalue()


def f(name, data=b"x", **attrs):
    return (name, data, attrs)


def d(name, **attrs):
    return (name, None, attrs)


def snapshot(root):
    """Every path under ``root`` with its kind and content, to prove nothing changed."""
    seen = {}
    for directory, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = os.path.join(directory, name)
            st = os.lstat(path)
            content = open(path, "rb").read() if stat.S_ISREG(st.st_mode) else None
            seen[os.path.relpath(path, root)] = (stat.S_IFMT(st.st_mode), st.st_mode & 0o7777, content)
    return seen


@pytest.fixture
def place(tmp_path):
    """A directory tree around the extraction parent: ``outside`` holds a file an attack would
    want to overwrite, ``parent`` is where the private extraction directory is made."""
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "victim.txt").write_text("original")
    (tmp_path / "parent").mkdir()
    return tmp_path


def extract(data, place, tarmod, **kwargs):
    return archive.extract(io.BytesIO(data), str(place / "parent"), tarmod=tarmod, **kwargs)


# ------------------------------------------------------------------------------------- the policy

@pytest.mark.parametrize("name,attrs,problem", [
    ("VOCdevkit/VOC2007/JPEGImages/1.jpg", {}, None),
    ("./VOCdevkit/a.txt", {}, None),
    ("link", {"type": tarfile.SYMTYPE, "linkname": "target"}, "is a symbolic link (to 'target')"),
    ("hard", {"type": tarfile.LNKTYPE, "linkname": "a.txt"}, "is a hard link (to 'a.txt')"),
    ("dev", {"type": tarfile.CHRTYPE}, "is a character device"),
    ("blk", {"type": tarfile.BLKTYPE}, "is a block device"),
    ("fifo", {"type": tarfile.FIFOTYPE}, "is a FIFO"),
    ("sparse", {"type": tarfile.GNUTYPE_SPARSE}, "is a sparse file"),
    ("label", {"type": b"V"}, "unsupported member type ('V')"),
    ("../evil", {}, "'..' component"),
    ("a/../../evil", {}, "'..' component"),
    ("/etc/evil", {}, "absolute"),
    ("", {}, "absolute or empty"),
    ("a\x00b", {}, "NUL byte"),
    ("a/" + "b" * 256, {}, "longer than"),
    ("/".join(["abcdefgh"] * 120), {}, "longer than"),
])
def test_member_policy(name, attrs, problem):
    info = tarfile.TarInfo(name)
    for key, value in attrs.items():
        setattr(info, key, value)
    found = member_problem(info)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found, found


def test_duplicate_and_file_as_directory_members_are_found():
    index = archive.MemberIndex()
    regular, folder = tarfile.TarInfo("a/b.txt"), tarfile.TarInfo("a")
    folder.type = tarfile.DIRTYPE
    assert index.problem(folder) is None
    assert index.problem(regular) is None
    assert index.problem(folder) is None  # a directory given twice is harmless
    assert "appears twice" in index.problem(tarfile.TarInfo("./a/b.txt"))
    assert "which is a file" in index.problem(tarfile.TarInfo("a/b.txt/c"))
    assert "name of a directory" in index.problem(tarfile.TarInfo("a"))


# ------------------------------------------------------------------------------------- extraction

def test_extracts_files_and_directories_with_normalised_modes_and_no_owner(place, tarmod):
    data = make_tar([d("top", mode=0o777), f("top/a.txt", b"alpha", mode=0o4777, uid=4321, gid=4321,
                                              uname="someone", gname="group"),
                     f("top/sub/b.bin", b"\x00" * 5000, mode=0o600), f("./top/c.txt", b"c")])
    result = extract(data, place, tarmod)
    assert os.path.dirname(result.path) == str(place / "parent")
    assert stat.S_IMODE(os.stat(result.path).st_mode) == 0o700  # private until the caller moves it
    assert (result.files, result.bytes) == (3, 5 + 5000 + 1)
    top = os.path.join(result.path, "top")
    assert open(os.path.join(top, "a.txt"), "rb").read() == b"alpha"
    for path, mode in ((top, 0o755), (os.path.join(top, "sub"), 0o755), (os.path.join(top, "a.txt"), 0o644),
                       (os.path.join(top, "sub", "b.bin"), 0o644)):
        st = os.stat(path)
        assert stat.S_IMODE(st.st_mode) == mode, path
        assert (st.st_uid, st.st_gid) == (os.getuid(), os.getgid())
    assert os.stat(os.path.join(top, "a.txt")).st_mtime == 1_600_000_000


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_long_names_in_every_header_format(place, tarmod, fmt):
    name = "VOCdevkit/" + "/".join(["d%03d" % i for i in range(40)]) + "/image.jpg"  # 170 bytes
    if fmt == tarfile.USTAR_FORMAT:
        name = "VOCdevkit/" + "x" * 120 + "/image.jpg"  # ustar splits it into prefix + name
    result = extract(make_tar([f(name, b"long")], fmt=fmt), place, tarmod)
    assert open(os.path.join(result.path, name), "rb").read() == b"long"


def test_gzip_stream_is_read_through_tarfile(place, tarmod):
    result = extract(make_tar([f("a/b.txt", b"zipped")], compression="gz"), place, tarmod)
    assert open(os.path.join(result.path, "a", "b.txt"), "rb").read() == b"zipped"


def test_select_keeps_only_the_chosen_members_but_checks_all(place, tarmod):
    data = make_tar([f("m/keep.json", b"{}"), f("m/skip.bin", b"big")])
    result = extract(data, place, tarmod, select=lambda m: m.name.endswith(".json"))
    assert sorted(os.listdir(os.path.join(result.path, "m"))) == ["keep.json"]
    with_link = make_tar([f("m/keep.json", b"{}"), f("m/l", b"", type=tarfile.SYMTYPE, linkname="/etc")])
    with pytest.raises(UnsafeArchive, match="'m/l' is a symbolic link"):
        extract(with_link, place, tarmod, select=lambda m: m.name.endswith(".json"))


@pytest.mark.parametrize("data,message", [
    (b"", "not a readable tar archive"),
    (b"this is not a tar archive at all" * 40, "not a readable tar archive"),
    (b"\x1f\x8b garbage", "not a readable tar archive"),
])
def test_unreadable_archives_say_so(place, tarmod, data, message):
    with pytest.raises(UnreadableArchive, match=message):
        extract(data, place, tarmod)
    assert os.listdir(place / "parent") == []


def test_truncated_and_corrupt_archives_leave_nothing(place, tarmod):
    good = make_tar([f("a/%d.jpg" % i, os.urandom(3000)) for i in range(4)])
    truncated = good[:5000]
    with pytest.raises(UnreadableArchive, match="unexpected end of data|truncated|not a readable"):
        extract(truncated, place, tarmod)
    corrupt = bytearray(good)
    corrupt[512 * 7 + 100:512 * 7 + 108] = b"garbage!"  # the third member's header checksum breaks
    with pytest.raises(UnreadableArchive, match="corrupt tar archive: an unreadable member header"):
        extract(bytes(corrupt), place, tarmod)
    assert os.listdir(place / "parent") == []


def test_limits_on_members_bytes_and_named_files(place, tarmod):
    data = make_tar([f("a/%d" % i, b"12345") for i in range(10)])
    with pytest.raises(UnsafeArchive, match="more than 5 members"):
        extract(data, place, tarmod, limits=Limits(max_members=5))
    with pytest.raises(UnsafeArchive, match="expands to more than 40 bytes"):
        extract(data, place, tarmod, limits=Limits(max_bytes=40))
    with pytest.raises(UnsafeArchive, match="'a/3' is 5 bytes, over the 4 allowed"):
        extract(data, place, tarmod, limits=Limits(file_caps={"3": 4}))
    assert os.listdir(place / "parent") == []


def test_gzip_bomb_is_refused_from_its_headers_before_anything_is_written(place, tarmod):
    bomb = io.BytesIO()
    with tarfile.open(fileobj=bomb, mode="w:gz") as out:  # 200 MB of zeros, about 200 KB compressed
        for index in range(10):
            info = tarfile.TarInfo("zeros-%d.bin" % index)
            info.size = 20 << 20
            out.addfile(info, io.BytesIO(bytes(info.size)))
    assert len(bomb.getvalue()) < 1 << 20
    calls = []
    with pytest.raises(UnsafeArchive, match="expands to more than"):
        extract(bomb.getvalue(), place, tarmod, limits=Limits(max_bytes=50 << 20), before_write=calls.append)
    assert calls == [] and os.listdir(place / "parent") == []


def test_before_write_gets_the_expanded_size_and_can_stop_it(place, tarmod):
    data = make_tar([f("a", b"x" * 1000, mode=0o644), f("b", b"y" * 24)], compression="gz")
    seen = []

    def no_room(expanded):
        seen.append(expanded)
        raise RuntimeError("no room")

    with pytest.raises(RuntimeError):
        extract(data, place, tarmod, before_write=no_room)
    assert seen == [1024] and os.listdir(place / "parent") == []


def test_a_refused_member_anywhere_means_nothing_is_written(place, tarmod):
    data = make_tar([f("VOCdevkit/VOC2007/1.jpg", b"a" * 100000)] * 1 +
                    [f("VOCdevkit/VOC2007/%d.jpg" % i, b"b") for i in range(2, 50)] +
                    [f("VOCdevkit/evil", b"", type=tarfile.FIFOTYPE)])
    before = snapshot(place)
    with pytest.raises(UnsafeArchive, match="'VOCdevkit/evil' is a FIFO"):
        extract(data, place, tarmod)
    assert snapshot(place) == before


# ------------------------------------------------------------------------------ adversarial suite

def _links(tmp):
    """Archives that try to write outside through links, in every combination we know of."""
    deep = "/".join(["d"] * 30)
    return {
        "symlink-out-then-write-through": [f("VOCdevkit/out", b"", type=tarfile.SYMTYPE, linkname="../../outside"),
                                           f("VOCdevkit/out/victim.txt", b"pwned")],
        "absolute-symlink": [f("a", b"", type=tarfile.SYMTYPE, linkname=str(tmp / "outside" / "victim.txt")),
                             f("a", b"pwned")],
        "hardlink-to-outside": [f("h", b"", type=tarfile.LNKTYPE, linkname=str(tmp / "outside" / "victim.txt"))],
        "hardlink-to-a-symlink": [f("s", b"", type=tarfile.SYMTYPE, linkname="../../outside/victim.txt"),
                                  f("h", b"", type=tarfile.LNKTYPE, linkname="s"), f("h", b"pwned")],
        "symlinked-directory-alias": [d("real"), f("alias", b"", type=tarfile.SYMTYPE, linkname="real/../.."),
                                      f("alias/outside/victim.txt", b"pwned")],
        "symlink-replaced-by-file": [f("x", b"", type=tarfile.SYMTYPE, linkname="../../outside/victim.txt"),
                                     f("x", b"harmless"), f("x", b"pwned", type=tarfile.SYMTYPE,
                                                           linkname="../../outside/victim.txt")],
        "symlink-chain": [f("l1", b"", type=tarfile.SYMTYPE, linkname="l2"),
                          f("l2", b"", type=tarfile.SYMTYPE, linkname="../../outside"),
                          f("l1/victim.txt", b"pwned")],
        "path-max-through-links": [d(deep)] + [f(deep + "/l%d" % i, b"", type=tarfile.SYMTYPE, linkname="../" * 30)
                                                for i in range(3)] +
                                  [f(deep + "/l0/outside/victim.txt", b"pwned")],
        "dotdot-in-pax-path": [f("safe", b"pwned", pax_headers={"path": "../../outside/victim.txt"})],
        "absolute-in-gnu-longname": [f(str(tmp / "outside") + "/" + "./" * 60 + "victim.txt", b"pwned")],
        "device": [f("dev", b"", type=tarfile.CHRTYPE, devmajor=1, devminor=3)],
        "duplicate-file": [f("a.txt", b"one"), f("a.txt", b"two")],
        "file-then-dir": [f("a", b"one"), d("a"), f("a/b", b"two")],
    }


@pytest.mark.parametrize("case", sorted(_links(__import__("pathlib").Path("/x"))))
def test_adversarial_archives_change_nothing_outside(place, tarmod, case):
    members = _links(place)[case]
    fmt = tarfile.PAX_FORMAT if "pax" in case else tarfile.GNU_FORMAT
    data = make_tar(members, fmt=fmt)
    before = snapshot(place)
    with pytest.raises(UnsafeArchive) as caught:
        extract(data, place, tarmod)
    assert "member" in caught.value.reason
    assert snapshot(place) == before
    assert (place / "outside" / "victim.txt").read_text() == "original"


def test_concurrent_extractions_each_get_their_own_directory(place, tarmod):
    archives = [make_tar([f("VOCdevkit/VOC2007/%d/%d.jpg" % (n, i), os.urandom(2000)) for i in range(40)])
                for n in range(4)]
    results, errors = {}, []

    def work(n):
        try:
            results[n] = extract(archives[n], place, tarmod)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len({r.path for r in results.values()}) == 4
    for n, result in results.items():
        assert os.listdir(os.path.join(result.path, "VOCdevkit", "VOC2007")) == [str(n)]
        assert result.files == 40


def test_the_module_picks_the_stdlib_where_it_has_filters_and_the_backport_elsewhere(monkeypatch):
    assert archive.tarfile_module() is tarfile
    monkeypatch.delattr(tarfile, "data_filter")
    from backports import tarfile as backport

    assert archive.tarfile_module() is backport


def test_extraction_through_a_real_file_handle(tmp_path, tarmod):
    path = tmp_path / "a.tar.gz"
    with gzip.open(path, "wb") as out:
        out.write(make_tar([f("x/y.txt", b"from disk")]))
    (tmp_path / "p").mkdir()
    started = time.monotonic()
    with open(path, "rb") as handle:
        result = archive.extract(handle, str(tmp_path / "p"), tarmod=tarmod)
    assert open(os.path.join(result.path, "x", "y.txt"), "rb").read() == b"from disk"
    assert time.monotonic() - started < 10


# ------------------------------------------------------------- headers, metadata and streams that lie

def header(name, size, type_=tarfile.REGTYPE, fmt=tarfile.USTAR_FORMAT):
    info = tarfile.TarInfo(name)
    info.size, info.type = size, type_
    return info.tobuf(fmt)


def padded(data):
    return data + b"\0" * (-len(data) % 512)


def with_base256_size(block, size):
    """A header block whose size field says ``size`` in GNU base-256 (how a negative one is written)."""
    block = bytearray(block)
    block[124:136] = (size % (1 << 88)).to_bytes(11, "big").rjust(12, b"\xff" if size < 0 else b"\x80")
    block[148:156] = b" " * 8
    block[148:156] = ("%06o\0 " % sum(block)).encode()
    return bytes(block)


END = b"\0" * 1024


def negative_pax_size():
    return make_tar([f("a.txt", b"hello", pax_headers={"size": str(-(1 << 40))})], fmt=tarfile.PAX_FORMAT)


def negative_size_back_onto_a_hidden_header():
    """'cover' holds a header for 'hidden' (1 MB of zeros follow it nowhere); 'x' says -1024 bytes,
    which would take tarfile back onto that hidden header."""
    hidden = header("hidden", 1 << 20)
    cover = header("cover", len(hidden)) + hidden
    return cover + with_base256_size(header("x", 0), -1536) + END


@pytest.mark.parametrize("build", [negative_pax_size, negative_size_back_onto_a_hidden_header])
def test_a_negative_size_is_refused_before_it_is_counted_or_followed(place, tarmod, build):
    calls = []
    with pytest.raises(UnsafeArchive, match="negative size"):
        extract(build(), place, tarmod, limits=Limits(max_bytes=1000), before_write=calls.append)
    assert calls == [] and os.listdir(place / "parent") == []


def test_extracted_bytes_are_read_back_from_the_disk_and_stop_at_the_cap(tmp_path):
    (tmp_path / "a").write_bytes(b"x" * 100)  # more than its header says, as a lying size would leave
    members = [tarfile.TarInfo("a"), tarfile.TarInfo("b")]
    members[0].size = members[1].size = 10
    counted = archive._WithinCap(members, str(tmp_path), limit=50)
    with pytest.raises(UnsafeArchive, match="expands to more than 50 bytes"):
        assert [m.name for m in counted] == ["a"]
    assert counted.written == 100


@pytest.mark.parametrize("pax", [{"mtime": "inf"}, {"mtime": "nan"}, {"mtime": "-inf"}, {"mtime": "1e300"},
                                 {"mtime": "-5"}, {"uid": str(1 << 80), "gid": str(1 << 80)}])
def test_absurd_metadata_is_normalised_not_applied(place, tarmod, pax):
    data = make_tar([d("top", pax_headers=dict(pax)), f("top/a.txt", b"alpha", pax_headers=dict(pax))],
                    fmt=tarfile.PAX_FORMAT)
    started = time.time()
    result = extract(data, place, tarmod)
    for path, mode in ((os.path.join(result.path, "top"), 0o755), (os.path.join(result.path, "top", "a.txt"), 0o644)):
        st = os.stat(path)
        assert stat.S_IMODE(st.st_mode) == mode and (st.st_uid, st.st_gid) == (os.getuid(), os.getgid())
        if "mtime" in pax:
            assert st.st_mtime >= started - 5  # left at the time of extraction
    assert open(os.path.join(result.path, "top", "a.txt"), "rb").read() == b"alpha"


def test_a_mode_with_high_bits_is_normalised(place, tarmod):
    block = bytearray(header("a.txt", 5, fmt=tarfile.GNU_FORMAT))
    block[100:108] = b"\xff" * 8  # base-256 mode: every bit set
    block[148:156] = b" " * 8
    block[148:156] = ("%06o\0 " % sum(block)).encode()
    result = extract(bytes(block) + padded(b"hello") + END, place, tarmod)
    assert stat.S_IMODE(os.stat(os.path.join(result.path, "a.txt")).st_mode) == 0o644


def compressions():
    import bz2
    import lzma

    return {"gz": gzip.compress, "bz2": bz2.compress, "xz": lzma.compress}


@pytest.mark.parametrize("kind", ["gz", "bz2", "xz"])
def test_a_corrupt_or_truncated_stream_is_an_unreadable_archive_wherever_it_breaks(place, tarmod, kind):
    plain = make_tar([f("d/%d.bin" % i, os.urandom(9000)) for i in range(4)])
    stream = compressions()[kind](plain)
    for cut in sorted(set(range(1, len(stream), max(1, len(stream) // 60))) | {len(stream) - 1, len(stream) - 4}):
        with pytest.raises(UnreadableArchive):
            extract(stream[:cut], place, tarmod)
    for position in range(10, len(stream), max(1, len(stream) // 60)):
        altered = bytearray(stream)
        altered[position] ^= 0x55
        try:
            result = extract(bytes(altered), place, tarmod)
        except archive.ArchiveError:
            continue
        for i in range(4):  # only an alteration outside the data (a gzip header's mtime) may pass
            with open(os.path.join(result.path, "d", "%d.bin" % i), "rb") as handle:
                assert handle.read() == tarfile.open(fileobj=io.BytesIO(plain)).extractfile("d/%d.bin" % i).read()
    assert all(name.startswith(".extract-") for name in os.listdir(place / "parent"))


def pax_record(key, value):
    body = " %s=%s\n" % (key, value)
    length = len(body) + 1
    while len(str(length)) + len(body) != length:
        length += 1
    return ("%d%s" % (length, body)).encode()


def extended(type_, payload):
    return header("././@PaxHeader", len(payload), type_) + padded(payload)


A_MEMBER = header("a.txt", 5) + padded(b"hello")


@pytest.mark.parametrize("case", ["large-pax", "large-global", "large-longname", "pax-chain", "longname-chain",
                                  "many-globals"])
def test_extended_headers_are_bounded_before_tarfile_reads_them(place, tarmod, case):
    slow = b"9" * (256 << 10)  # digits without a record: tarfile's parser takes minutes over these
    data = {
        "large-pax": extended(tarfile.XHDTYPE, slow) + A_MEMBER,
        "large-global": extended(tarfile.XGLTYPE, slow) + A_MEMBER,
        "large-longname": header("././@LongLink", 1 << 30, tarfile.GNUTYPE_LONGNAME) + b"n" * 4096 + A_MEMBER,
        "pax-chain": extended(tarfile.XHDTYPE, pax_record("comment", "x")) * 5000 + A_MEMBER,
        "longname-chain": extended(tarfile.GNUTYPE_LONGNAME, b"a.txt\0") * 5000 + A_MEMBER,
        "many-globals": b"".join(extended(tarfile.XGLTYPE, pax_record("comment", "x"))
                                 + header("f%d" % i, 1) + padded(b"x") for i in range(40)),
    }[case]
    data = gzip.compress(data + END, compresslevel=1)
    started = time.monotonic()
    with pytest.raises(UnsafeArchive, match="extended header|pax global headers"):
        extract(data, place, tarmod)
    assert time.monotonic() - started < 60  # unbounded, tarfile takes minutes: this only catches that
    assert os.listdir(place / "parent") == []


def test_extended_headers_a_writer_makes_still_pass(place, tarmod):
    long_name = "VOCdevkit/" + "/".join(["d%03d" % i for i in range(60)]) + "/é.jpg"  # 250+ bytes, not ASCII
    data = make_tar([f(long_name, b"img", pax_headers={"comment": "made by a labelling tool"})], fmt=tarfile.PAX_FORMAT)
    result = extract(data, place, tarmod)
    assert open(os.path.join(result.path, long_name), "rb").read() == b"img"


def test_an_archive_that_does_not_fit_the_free_disk_is_refused_before_writing(small_disk, tarmod):
    data = gzip.compress(make_tar([f("zeros.bin", bytes(30 << 20))]))  # 30 MB on a 24 MB disk
    with pytest.raises(archive.NoRoom, match=r"expands to 31457280 bytes and \d+ are free under"):
        archive.extract(io.BytesIO(data), str(small_disk), tarmod=tarmod)
    assert os.listdir(small_disk) == []
