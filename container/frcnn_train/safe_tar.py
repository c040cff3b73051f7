"""Extract a tar stream without letting any member land outside the target directory.

Two layers check the members before they touch the disk:

1. :func:`member_problem`, a pure function of the member's name, type and link target (and the
   symlinks already extracted): absolute names, ``..`` components, links whose target leaves the
   tree, writes through an extracted symlink, and devices/FIFOs are refused; so are member types
   this extractor does not write (sparse files, volume labels, ...).
2. ``tarfile``'s own ``data`` extraction filter (Python 3.8.17+/3.9.17+/3.10.12+/3.11.4+), which
   resolves paths on disk (``realpath``), plus our own resolved-path checks. They run for every
   link member and for everything after the first symlink; plain files and directories in a
   still symlink-free tree take a fast path with the same verdict (see :class:`_Checks`), or pass
   ``filter_every_member=True``. On a Python without filters our resolved-path checks stand alone.
   Either way nothing keeps the archive's owner or special mode bits (the data filter's rules:
   ``mode & 0o755``, owner read/write).

A refused member raises :class:`UnsafeMemberError` naming it; extraction stops there, so nothing
after it is written. The stream is read strictly in order, one header at a time: it can come from
a pipe or a network transfer while the bytes are still arriving. The reader is our own (headers
parsed by ``tarfile.TarInfo.frombuf``, GNU long names and pax records applied): member bodies go
straight to their files, with ``splice`` when the stream is a pipe, so that extraction costs
little more than the kernel's copy. Compressed streams (gzip, bzip2, xz) go through ``tarfile``'s
stream reader with the same checks. ``python -m frcnn_train.safe_tar DEST`` extracts stdin in a
process of its own (see :func:`child_main`)."""

import errno
import os
import posixpath
import stat
import tarfile
from dataclasses import dataclass

HAVE_DATA_FILTER = hasattr(tarfile, "data_filter")

_REFUSED_TYPES = {
    tarfile.CHRTYPE: "a character device",
    tarfile.BLKTYPE: "a block device",
    tarfile.FIFOTYPE: "a FIFO",
}


class UnsafeMemberError(Exception):
    """A member that would escape the target directory or create a special file."""

    def __init__(self, member, reason):
        super().__init__("member %r %s" % (member, reason))
        self.member = member
        self.reason = reason


def _parts(path):
    return [p for p in path.split("/") if p not in ("", ".")]


def member_problem(name, kind, linkname="", symlinks=()):
    """Why a member may not be extracted, or None when it is safe. Pure: no filesystem access.

    ``kind`` is the tarfile type byte (``tarfile.REGTYPE``, ``SYMTYPE``, ...), ``linkname`` the
    link target of a link member and ``symlinks`` the normalised names of symlinks already
    extracted from the same archive.
    """
    if not name or "\x00" in name:
        return "has an empty or NUL-containing name"
    if name.startswith("/") or (len(name) > 1 and name[1] == ":") or name.startswith("\\"):
        return "has an absolute path"
    parts = _parts(name)
    if ".." in parts:
        return "has a '..' component (path outside the target)"
    if kind in _REFUSED_TYPES:
        return "is %s" % _REFUSED_TYPES[kind]
    for depth in range(1, len(parts)):
        if "/".join(parts[:depth]) in symlinks:
            return "would be written through the symlink %r" % "/".join(parts[:depth])
    if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
        if not linkname or "\x00" in linkname:
            return "is a link with an empty target"
        if linkname.startswith("/") or (len(linkname) > 1 and linkname[1] == ":"):
            return "links to the absolute path %r" % linkname
        if kind == tarfile.SYMTYPE:
            target = posixpath.normpath(posixpath.join(posixpath.dirname("/".join(parts)), linkname))
        else:  # a hard link names an archive member
            target = posixpath.normpath(linkname)
        if target == ".." or target.startswith("../"):
            return "links to %r, outside the target" % linkname
        if kind == tarfile.LNKTYPE and target in symlinks:
            return "is a hard link to the symlink %r" % target
    return None


def _inside(path, root):
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


@dataclass
class ExtractStats:
    members: int = 0
    files: int = 0
    bytes: int = 0


def _plain_mode(member):
    """The data filter's mode rule for a regular file or directory."""
    mode = member.mode
    if mode is None or member.isdir():
        return None
    mode &= 0o755
    if not mode & 0o100:
        mode &= ~0o111
    return mode | 0o600


class _Checks:
    """The per-member decision: our checks, then (slow path) tarfile's data filter and a
    resolved-path check; returns the normalised name and the mode to give a regular file.

    Fast path: while the archive has created no symlink in a target that started empty, a member
    path that is relative and free of '..' (our check) resolves to exactly its lexical path, so the
    resolution work of the data filter (``realpath`` of the target and of the member, an ``lstat``
    per path component) cannot change the verdict for a regular file or a directory; those get the
    data filter's attribute rules (no owner, ``mode & 0o755``, owner read/write) directly. Every
    link member, and every member after the first symlink (or in a target that was not empty),
    goes through ``tarfile.data_filter`` (where the Python has it) and our resolved-path checks.
    """

    def __init__(self, dest, filter_every_member=False):
        self.dest = os.path.realpath(dest)
        self.fast = not filter_every_member and not os.listdir(self.dest)
        self.symlinks = set()

    def __call__(self, member):
        problem = member_problem(member.name, member.type, member.linkname, self.symlinks)
        if problem:
            raise UnsafeMemberError(member.name, problem)
        if member.type not in _KNOWN_TYPES:
            raise UnsafeMemberError(member.name, "has the unsupported member type %r" % member.type)
        normalised = "/".join(_parts(member.name))
        if not normalised:  # the archive's "./" entry
            return None, None
        if self.fast and not self.symlinks and (member.isreg() or member.isdir()):
            return normalised, _plain_mode(member)
        return normalised, self._checked(member, normalised)

    def _checked(self, member, normalised):
        mode = _plain_mode(member)
        if HAVE_DATA_FILTER:
            try:
                filtered = tarfile.data_filter(member, self.dest)
            except tarfile.FilterError as exc:
                raise UnsafeMemberError(member.name, "is refused by tarfile's data filter: %s" % exc) from None
            if filtered is not None and filtered.isreg() and filtered.mode is not None:
                mode = filtered.mode
        if member.issym() or member.islnk():
            base = os.path.dirname(os.path.join(self.dest, normalised)) if member.issym() else self.dest
            target = os.path.realpath(os.path.join(base, member.linkname))
            if not _inside(target, self.dest):
                raise UnsafeMemberError(member.name, "links to %r, outside the target" % member.linkname)
        target = os.path.realpath(os.path.join(self.dest, normalised))
        if not _inside(target, self.dest):
            raise UnsafeMemberError(member.name, "resolves to %s, outside the target" % target)
        return mode


# Member types this extractor writes (regular files, directories, links) or refuses by name
# (devices, FIFOs: member_problem). Anything else (sparse files, volume labels, ...) is refused.
_KNOWN_TYPES = frozenset((tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE, tarfile.DIRTYPE,
                          tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.FIFOTYPE))
_REGULAR = frozenset((tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.CONTTYPE))
_META_TYPES = frozenset((tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE,
                         tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE))
_COMPRESSED_MAGIC = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00")
_COPY = 1 << 20
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def _block(size):
    return (size + tarfile.BLOCKSIZE - 1) // tarfile.BLOCKSIZE * tarfile.BLOCKSIZE


def read_exact(read, n):
    """``n`` bytes from ``read(k)`` calls, fewer only where the stream ends."""
    data = read(n)
    if len(data) == n or not data:
        return data
    parts = [data]
    got = len(data)
    while got < n:
        more = read(n - got)
        if not more:
            break
        parts.append(more)
        got += len(more)
    return b"".join(parts)


def write_all(fd, data):
    """``os.write`` until all of ``data`` (a bytes-like object) is written."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class _ObjSource:
    """The tar stream from a file object's ``read(n)``."""

    def __init__(self, fileobj):
        self._read = fileobj.read

    def read_exact(self, n):
        return read_exact(self._read, n)

    def copy_to(self, out_fd, n):
        """Write the next ``n`` bytes of the stream to ``out_fd`` (``None``: discard them)."""
        while n:
            data = self._read(min(n, _COPY))
            if not data:
                raise tarfile.ReadError("unexpected end of data")
            n -= len(data)
            if out_fd is not None:
                write_all(out_fd, data)


class _FdSource(_ObjSource):
    """The tar stream from a file descriptor. From a pipe, member bodies move to their files with
    ``splice`` (kernel to kernel: this process never copies them); otherwise read + write."""

    def __init__(self, fd):
        self._fd = fd
        self._splice = hasattr(os, "splice") and stat.S_ISFIFO(os.fstat(fd).st_mode)

    def _read(self, n):
        return os.read(self._fd, n)

    def copy_to(self, out_fd, n):
        if out_fd is not None and self._splice:
            while n:
                try:
                    moved = os.splice(self._fd, out_fd, n)
                except OSError as exc:  # a filesystem without splice: plain copies from here on
                    if exc.errno not in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                        raise
                    self._splice = False
                    break
                if not moved:
                    raise tarfile.ReadError("unexpected end of data")
                n -= moved
        _ObjSource.copy_to(self, out_fd, n)


def _pax_records(data):
    """The key/value records of a pax extended header (``"%d %s=%s\\n"`` each)."""
    records, pos = {}, 0
    while pos < len(data) and data[pos:pos + 1] not in (b"", b"\x00"):
        space = data.find(b" ", pos)
        if space < 0:
            raise tarfile.ReadError("invalid pax header")
        try:
            length = int(data[pos:space])
        except ValueError:
            raise tarfile.ReadError("invalid pax header") from None
        if length <= 0 or pos + length > len(data) or data[pos + length - 1:pos + length] != b"\n":
            raise tarfile.ReadError("invalid pax header")
        key, sep, value = data[space + 1:pos + length - 1].partition(b"=")
        if not sep:
            raise tarfile.ReadError("invalid pax header")
        records[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        pos += length
    return records


def _members(src, first_block):
    """Yield ``(TarInfo, data_size)`` for each member, reading headers strictly in order from
    ``first_block`` (read already) on; the caller must consume exactly ``data_size`` bytes (padded
    to blocks) before the next one."""
    pax_global = {}
    longname = longlink = None
    pax = {}
    first = True
    while True:
        buf = first_block if first else src.read_exact(tarfile.BLOCKSIZE)
        if not buf:
            if first:
                raise tarfile.ReadError("empty file")
            return  # a tar without end-of-archive blocks: tarfile accepts it too
        if len(buf) < tarfile.BLOCKSIZE:
            raise tarfile.ReadError("unexpected end of data")
        try:
            info = tarfile.TarInfo.frombuf(buf, "utf-8", "surrogateescape")
        except tarfile.EOFHeaderError:
            if longname is not None or longlink is not None or pax:
                raise tarfile.ReadError("an extended header is not followed by a member")
            return
        except tarfile.HeaderError as exc:
            if first:
                raise tarfile.ReadError("not a tar archive (%s in the first header)" % exc) from None
            raise tarfile.ReadError("invalid header: %s" % exc) from None
        first = False
        if info.type in _META_TYPES:
            if not 0 <= info.size <= 1 << 20:
                raise tarfile.ReadError("an extended header of %d bytes" % info.size)
            data = src.read_exact(_block(info.size))
            if len(data) < _block(info.size):
                raise tarfile.ReadError("unexpected end of data")
            data = data[:info.size]
            if info.type == tarfile.GNUTYPE_LONGNAME:
                longname = tarfile.nts(data, "utf-8", "surrogateescape")
            elif info.type == tarfile.GNUTYPE_LONGLINK:
                longlink = tarfile.nts(data, "utf-8", "surrogateescape")
            elif info.type == tarfile.XGLTYPE:
                pax_global.update(_pax_records(data))
            else:
                pax.update(_pax_records(data))
            continue
        records = dict(pax_global, **pax) if pax_global else pax
        if longname is not None:
            info.name = longname
        if longlink is not None:
            info.linkname = longlink
        if "path" in records:
            info.name = records["path"]
        if "linkpath" in records:
            info.linkname = records["linkpath"]
        try:
            if "size" in records:
                info.size = int(records["size"])
            if "mtime" in records:
                info.mtime = float(records["mtime"])
        except ValueError:
            raise tarfile.ReadError("invalid pax header for %r" % info.name) from None
        if info.size < 0:
            raise tarfile.ReadError("invalid header: %r has a negative size" % info.name)
        if info.isdir():
            info.name = info.name.rstrip("/")
        longname = longlink = None
        pax = {}
        carries_data = info.type in _REGULAR or info.type not in _KNOWN_TYPES
        yield info, (info.size if carries_data else 0)


def _set_mtime(path_or_fd, mtime):
    """The member's modification time; one the filesystem cannot hold is left as extracted."""
    try:
        os.utime(path_or_fd, (mtime, mtime))
    except (OSError, OverflowError, ValueError):
        pass


def _mkdirs(path, made):
    if path in made:
        return
    os.makedirs(path, exist_ok=True)
    made.add(path)


def _extract(src, first_block, dest, filter_every_member):
    os.makedirs(dest, exist_ok=True)
    check = _Checks(dest, filter_every_member)
    root = check.dest
    stats = ExtractStats()
    made = {root}
    dir_times = []
    for info, size in _members(src, first_block):
        normalised, mode = check(info)
        if normalised is None:
            src.copy_to(None, _block(size))
            continue
        path = os.path.join(root, normalised)
        stats.members += 1
        if normalised in check.symlinks:  # a member replacing an extracted symlink, not written through it
            os.unlink(path)
            check.symlinks.discard(normalised)
        if info.type in _REGULAR:
            _mkdirs(os.path.dirname(path), made)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | _NOFOLLOW | _CLOEXEC, 0o600)
            try:
                src.copy_to(fd, size)
                if mode is not None:
                    os.fchmod(fd, mode)
                _set_mtime(fd, info.mtime)
            finally:
                os.close(fd)
            src.copy_to(None, _block(size) - size)  # the padding
            stats.files += 1
            stats.bytes += size
        elif info.type == tarfile.DIRTYPE:
            _mkdirs(path, made)
            dir_times.append((path, info.mtime))
        else:  # symbolic or hard link, no body (member_problem refused devices and FIFOs)
            _mkdirs(os.path.dirname(path), made)
            if os.path.lexists(path):
                os.unlink(path)
            if info.issym():
                os.symlink(info.linkname, path)
                check.symlinks.add(normalised)
            else:
                target = os.path.join(root, "/".join(_parts(info.linkname)))
                os.link(target, path, follow_symlinks=False)
    for path, mtime in reversed(dir_times):
        _set_mtime(path, mtime)
    return stats


def _extract_compressed(fileobj, dest, filter_every_member):
    """A gzip/bzip2/xz-compressed stream: tarfile's stream reader, the same checks per member."""
    os.makedirs(dest, exist_ok=True)
    check = _Checks(dest, filter_every_member)
    stats = ExtractStats()
    with tarfile.open(fileobj=fileobj, mode="r|*") as archive:
        archive.errorlevel = 2
        for member in archive:
            normalised, mode = check(member)
            if normalised is None:
                continue
            if member.isreg():
                member.mode = mode
            # No owner names; -1 ids tell chown (run as root) to leave ownership as created.
            member.uname = member.gname = ""
            member.uid = member.gid = -1
            archive.extract(member, check.dest, set_attrs=not member.isdir(), numeric_owner=True,
                            **({"filter": "fully_trusted"} if HAVE_DATA_FILTER else {}))
            if member.issym():
                check.symlinks.add(normalised)
            stats.members += 1
            if member.isreg():
                stats.files += 1
                stats.bytes += member.size
    return stats


class _Prefixed:
    """``read(n)`` over ``head`` and then ``fileobj``."""

    def __init__(self, head, fileobj):
        self._head, self._read = head, fileobj.read

    def read(self, n=-1):
        if self._head:
            if n is None or n < 0:
                data, self._head = self._head + self._read(), b""
                return data
            data, self._head = self._head[:n], self._head[n:]
            return data
        return self._read(n)


def _extract_source(src, fileobj, dest, filter_every_member):
    head = src.read_exact(tarfile.BLOCKSIZE)
    if head.startswith(_COMPRESSED_MAGIC):
        return _extract_compressed(_Prefixed(head, fileobj), dest, filter_every_member)
    return _extract(src, head, dest, filter_every_member)


def extract_stream(fileobj, dest, filter_every_member=False):
    """Extract the tar read in order from ``fileobj`` into ``dest``; returns :class:`ExtractStats`.

    Raises UnsafeMemberError for a refused member and tarfile.TarError for a malformed archive.
    ``fileobj`` only needs ``read(n)``; the caller reads whatever follows the end-of-archive marker.
    One that also has ``read_exact(n)`` and ``copy_to(fd, n)`` (write the next n bytes to fd, or
    skip them for None) is used through those: member bodies then never pass through ``read``.
    ``filter_every_member`` runs tarfile's data filter on plain members too (see :class:`_Checks`).
    """
    src = fileobj if hasattr(fileobj, "read_exact") and hasattr(fileobj, "copy_to") else _ObjSource(fileobj)
    return _extract_source(src, fileobj, dest, filter_every_member)


def extract_fd(fd, dest, filter_every_member=False):
    """:func:`extract_stream` reading a file descriptor (from a pipe, bodies move by ``splice``)."""
    return _extract_source(_FdSource(fd), os.fdopen(fd, "rb", buffering=0, closefd=False), dest,
                           filter_every_member)


def child_main(argv=None):
    """``python -m frcnn_train.safe_tar DEST``: extract the tar on stdin into DEST in a process of
    its own (no interpreter lock shared with the transfer threads) and print one JSON line:
    {"ok": true, ...stats} (exit 0, after reading stdin to its end), {"unsafe": member, "reason"}
    (exit 3), {"tar_error": ...} (exit 4) or {"os_error": ...} (exit 5)."""
    import json
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    every = "--filter-every-member" in argv
    argv = [a for a in argv if a != "--filter-every-member"]
    if len(argv) != 1:
        sys.stderr.write("usage: python -m frcnn_train.safe_tar [--filter-every-member] DEST < archive.tar\n")
        return 2
    try:
        stats = extract_fd(0, argv[0], every)
        while os.read(0, 1 << 20):  # what follows the end-of-archive marker
            pass
        result, code = {"ok": True, "members": stats.members, "files": stats.files, "bytes": stats.bytes}, 0
    except UnsafeMemberError as exc:
        result, code = {"unsafe": exc.member, "reason": exc.reason}, 3
    except (tarfile.TarError, EOFError) as exc:
        result, code = {"tar_error": str(exc) or type(exc).__name__}, 4
    except OSError as exc:
        result, code = {"os_error": str(exc)}, 5
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    raise SystemExit(child_main())
