"""Extract a tar stream without letting any member land outside the target directory.

Two layers check the members before they touch the disk:

1. :func:`member_problem`, a pure function of the member's name, type and link target (and the
   symlinks already extracted): absolute names, ``..`` components, links whose target leaves the
   tree, writes through an extracted symlink, and devices/FIFOs are refused.
2. ``tarfile``'s own ``data`` extraction filter (Python 3.8.17+/3.9.17+/3.10.12+/3.11.4+), which
   resolves paths on disk (``realpath``), strips ownership and unsafe mode bits, plus our own
   resolved-path checks. It runs for every link member and for everything after the first symlink;
   plain files and directories in a still symlink-free tree take a fast path with the same
   verdict and attributes (see :class:`_Filter`), or pass ``filter_every_member=True``. On a Python
   without filters the first layer stands alone and ownership/special bits are dropped.

A refused member raises :class:`UnsafeMemberError` naming it; extraction stops there, so nothing
after it is written. The stream is read strictly in order (``mode="r|*"``): it can come from a
pipe or a network transfer while the bytes are still arriving. ``python -m frcnn_train.safe_tar
DEST`` extracts stdin in a process of its own (see :func:`child_main`)."""

import os
import posixpath
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


class _Filter:
    """The per-member filter: our checks, then tarfile's data filter, then a resolved-path check.

    Fast path: while the archive has created no symlink in a target that started empty, a member
    path that is relative and free of '..' (our check) resolves to exactly its lexical path, so the
    resolution work of the data filter (``realpath`` of the target and of the member, an ``lstat``
    per path component, about 40% of the extraction time of a VOC tar) cannot change the verdict
    for a regular file or a directory; those get the data filter's attribute rules (no owner,
    ``mode & 0o755``, owner read/write) directly. Every link member, and every member after the
    first symlink, goes through ``tarfile.data_filter`` and our resolved-path checks.
    """

    def __init__(self, dest, filter_every_member=False):
        self.dest = os.path.realpath(dest)
        self.fast = HAVE_DATA_FILTER and not filter_every_member and not os.listdir(self.dest)
        self.symlinks = set()
        self.stats = ExtractStats()

    def __call__(self, member, path):
        problem = member_problem(member.name, member.type, member.linkname, self.symlinks)
        if problem:
            raise UnsafeMemberError(member.name, problem)
        normalised = "/".join(_parts(member.name))
        if not normalised:  # the archive's "./" entry
            return None
        if self.fast and not self.symlinks and (member.isreg() or member.isdir()):
            member = member.replace(mode=_plain_mode(member), uid=None, gid=None, uname=None, gname=None,
                                    deep=False)
        else:
            member = self._checked(member, normalised)
        self.stats.members += 1
        if member.isreg():
            self.stats.files += 1
            self.stats.bytes += member.size
        return member

    def _checked(self, member, normalised):
        if HAVE_DATA_FILTER:
            try:
                member = tarfile.data_filter(member, self.dest)
            except tarfile.FilterError as exc:
                raise UnsafeMemberError(member.name, "is refused by tarfile's data filter: %s" % exc) from None
        if member.issym() or member.islnk():
            base = os.path.dirname(os.path.join(self.dest, normalised)) if member.issym() else self.dest
            target = os.path.realpath(os.path.join(base, member.linkname))
            if not _inside(target, self.dest):
                raise UnsafeMemberError(member.name, "links to %r, outside the target" % member.linkname)
        target = os.path.realpath(os.path.join(self.dest, normalised))
        if not _inside(target, self.dest):
            raise UnsafeMemberError(member.name, "resolves to %s, outside the target" % target)
        if member.issym():
            self.symlinks.add(normalised)
        if not HAVE_DATA_FILTER:  # no ownership, no special bits
            member.uid = member.gid = None
            member.uname = member.gname = None
            if member.mode is not None:
                member.mode = (member.mode & 0o755) | (0o600 if member.isreg() else 0)
        return member


def extract_stream(fileobj, dest, filter_every_member=False):
    """Extract the tar read in order from ``fileobj`` into ``dest``; returns :class:`ExtractStats`.

    Raises UnsafeMemberError for a refused member and tarfile.TarError for a malformed archive.
    ``fileobj`` only needs ``read(n)``; the caller reads whatever follows the end-of-archive marker.
    ``filter_every_member`` runs tarfile's data filter on plain members too (see :class:`_Filter`).
    """
    os.makedirs(dest, exist_ok=True)
    check = _Filter(dest, filter_every_member)
    with tarfile.open(fileobj=fileobj, mode="r|*") as archive:
        archive.errorlevel = 2
        if HAVE_DATA_FILTER:
            archive.extractall(check.dest, filter=check)
        else:  # pragma: no cover - Python without extraction filters
            for member in archive:
                member = check(member, check.dest)
                if member is not None:
                    # The filter dropped the owner names; -1 ids tell chown (run as root) to leave
                    # ownership as created instead of looking up a missing user or group name.
                    member.uid = member.gid = -1
                    archive.extract(member, check.dest, set_attrs=not member.isdir(),
                                    numeric_owner=True)
    return check.stats


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
    stream = open(0, "rb", buffering=1 << 20, closefd=False)
    try:
        stats = extract_stream(stream, argv[0], every)
        while stream.read(1 << 20):  # what follows the end-of-archive marker
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
