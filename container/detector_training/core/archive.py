"""Extracting untrusted tar archives: Python's ``tarfile`` under a policy made for datasets and models.

Datasets of images and model tarballs need regular files and directories, nothing else. So the
policy is stricter than tarfile's ``data`` filter, and checked for every member before a single
byte is written:

* only regular files and directories; a symbolic or hard link, a device, a FIFO, a sparse file or
  any other member type refuses the whole archive, with a message naming the member;
* names relative, with no ``..`` component, no NUL byte, at most 1,024 bytes and 255 per component;
  a name given twice (other than a directory) or a file used as a directory refuses it too;
* the number of members and the total expanded bytes are bounded, and the free-disk check counts
  expanded bytes (a gzip stream cannot get around it);
* a size that is negative (pax or base-256 headers can say so) refuses the archive before tarfile
  moves by it: tarfile would otherwise step back onto headers it already read, or hidden inside an
  earlier member;
* extended headers (pax ``x``/``g``, GNU long names) are bounded in size, in how many may come in a
  row, and pax global headers in number, before tarfile reads them: its pax parser costs time
  quadratic in a header's size on this Python;
* the whole stream is read to its end before anything is written, so that gzip's, bzip2's and xz's
  own checks see every byte: a truncated or altered stream is an :class:`UnreadableArchive`;
* modes are normalised (files 0644, directories 0755), the owner is never applied, an mtime that
  is not a plausible time (not finite, negative, past the year 2514) is not applied either.

Then tarfile extracts, with its ``data`` filter as a second layer (the stdlib's where the Python
has it, else the ``backports.tarfile`` package: Debian's Python 3.11.2 predates the filters), into a
fresh private directory (0700) that the caller moves into place only once the whole archive
extracted and the tree was checked again (regular files and directories only). The bytes extracted
are counted from the files as written, and extraction stops before the next file would pass the cap;
an archive whose expansion does not fit the free disk under the parent is refused before a byte is
written.

Every failure is one of the project's errors (:class:`ArchiveError` and its kinds), never the
exception of a compression library or of tarfile.
"""

import lzma
import os
import posixpath
import shutil
import tempfile
import zlib
from dataclasses import dataclass
from typing import Callable, Mapping, Optional

from detector_training.errors import ArchiveError

NAME_MAX_BYTES = 1024  # well under PATH_MAX with the target directory in front
COMPONENT_MAX_BYTES = 255
_COPY_BUFFER = 1 << 20
# A pax record holds at most one name (the policy's 1,024 bytes) and a few numbers; 4 KiB costs
# tarfile's parser milliseconds where 256 KiB cost it over a minute.
EXTENDED_HEADER_MAX_BYTES = 4096
EXTENDED_HEADERS_IN_A_ROW = 8  # a writer puts at most a global, a pax, a long-name and a long-link one
GLOBAL_HEADERS_MAX = 16
TRAILER_MAX_BYTES = 1 << 20  # after the end-of-archive marker: tar pads to 10 KiB records
MTIME_LIMIT = 1 << 34  # seconds since 1970 (the year 2514); later or not finite: not applied
DISK_MARGIN_BYTES = 64 << 20
_EXTENDED_TYPES = (b"x", b"g", b"X", b"L", b"K")
_KINDS = (("issym", "a symbolic link"), ("islnk", "a hard link"), ("ischr", "a character device"),
          ("isblk", "a block device"), ("isfifo", "a FIFO"))


def tarfile_module():
    """The stdlib ``tarfile`` where it has extraction filters (3.11.4+), else ``backports.tarfile``."""
    import tarfile

    if hasattr(tarfile, "data_filter"):
        return tarfile
    from backports import tarfile as backport

    return backport


class UnsafeArchive(ArchiveError):
    """A member the policy refuses (the whole archive is refused, nothing of it is kept)."""


class UnreadableArchive(ArchiveError):
    """Not a tar, truncated or corrupt (in the tar or in its compression)."""

    def __init__(self, reason, fix="use an intact copy of the archive (it may have been cut short or damaged)."):
        super().__init__(reason, fix)


class NoRoom(ArchiveError):
    """The archive expands to more than the free disk space where it would be extracted."""

    def __init__(self, reason, fix="give the job a larger volume (VolumeSizeInGB) or free disk space."):
        super().__init__(reason, fix)


@dataclass(frozen=True)
class Limits:
    max_members: int = 2_000_000
    max_bytes: int = 1 << 40  # total expanded bytes
    # Per-file caps by base name (e.g. {"classes.json": 1 MiB}); other files have max_bytes.
    file_caps: Mapping[str, int] = None


@dataclass(frozen=True)
class Extracted:
    path: str  # the private directory holding the tree
    files: int
    bytes: int


def _kind(info):
    if info.issparse() or info.type == b"S":  # GNU sparse (pax sparse members only set .sparse)
        return "a sparse file"
    for test, kind in _KINDS:
        if getattr(info, test)():
            return kind
    if info.isreg() or info.isdir():
        return None
    return "an unsupported member type (%r)" % info.type.decode("latin-1", "replace")


def member_problem(info):
    """Why the policy refuses this member, or None. Pure: looks at the header only."""
    if info.size < 0:
        return "has a negative size (%d)" % info.size
    kind = _kind(info)
    if kind:
        target = " (to %r)" % info.linkname if info.issym() or info.islnk() else ""
        return "is %s%s; only regular files and directories are allowed" % (kind, target)
    name = info.name
    if "\x00" in name:
        return "has a NUL byte in its name"
    if not name or name.startswith("/") or name.startswith("\\") or (len(name) > 1 and name[1] == ":"):
        return "has an absolute or empty name"
    parts = name.split("/")
    if ".." in parts:
        return "has a '..' component"
    try:
        encoded = [p.encode("utf-8", "surrogateescape") for p in parts]
    except UnicodeError:
        return "has a name that cannot be encoded"
    if sum(len(p) + 1 for p in encoded) - 1 > NAME_MAX_BYTES or any(len(p) > COMPONENT_MAX_BYTES for p in encoded):
        return "has a name longer than %d bytes (or a component longer than %d)" % (NAME_MAX_BYTES,
                                                                                   COMPONENT_MAX_BYTES)
    return None


class MemberIndex:
    """Duplicate and file-as-directory checks over the members seen so far."""

    def __init__(self):
        self._files = set()
        self._dirs = set()

    def problem(self, info):
        name = posixpath.normpath(info.name)
        if name == ".":
            return None if info.isdir() else "has an empty name"
        parent = posixpath.dirname(name)
        while parent:
            if parent in self._files:
                return "lies under %r, which is a file" % parent
            if parent in self._dirs:
                break  # its own parents were checked when it was added
            self._dirs.add(parent)
            parent = posixpath.dirname(parent)
        if name in self._files:
            return "appears twice"
        if info.isdir():
            self._dirs.add(name)
        elif name in self._dirs:
            return "is a file with the name of a directory"
        else:
            self._files.add(name)
        return None


def _bounded_tarfile(tarmod):
    """``tarmod.TarFile`` whose headers are checked before tarfile acts on them (see the module's
    docstring): a negative size, an extended header over its size, or too many of them."""

    class BoundedTarInfo(tarmod.TarInfo):
        __slots__ = ()

        def _proc_member(self, tarfile):  # tarfile's documented hook for subclasses
            if self.size < 0:
                raise UnsafeArchive("the header at byte %d has a negative size (%d)" % (self.offset, self.size))
            if self.type not in _EXTENDED_TYPES:
                tarfile.extended_run = 0
                return super()._proc_member(tarfile)
            tarfile.extended_run += 1
            tarfile.global_headers += self.type == b"g"
            if self.size > EXTENDED_HEADER_MAX_BYTES:
                raise UnsafeArchive("an extended header at byte %d is %d bytes, over the %d allowed"
                                    % (self.offset, self.size, EXTENDED_HEADER_MAX_BYTES))
            if tarfile.extended_run > EXTENDED_HEADERS_IN_A_ROW:
                raise UnsafeArchive("more than %d extended headers in a row at byte %d"
                                    % (EXTENDED_HEADERS_IN_A_ROW, self.offset))
            if tarfile.global_headers > GLOBAL_HEADERS_MAX:
                raise UnsafeArchive("more than %d pax global headers" % GLOBAL_HEADERS_MAX)
            return super()._proc_member(tarfile)

    class BoundedTarFile(tarmod.TarFile):
        tarinfo = BoundedTarInfo
        extended_run = 0
        global_headers = 0

    return BoundedTarFile


def _normalise(tarmod):
    def member_filter(member, path):
        member = tarmod.data_filter(member, path)  # second layer: absolute, outside, links, modes
        mtime = member.mtime if 0 <= member.mtime < MTIME_LIMIT else None  # NaN compares false
        return member.replace(mode=0o755 if member.isdir() else 0o644, uid=None, gid=None, uname=None,
                              gname=None, mtime=mtime, deep=False)

    return member_filter


class _WithinCap:
    """The members for tarfile to extract, one at a time: each extracted file's size is read back
    from the disk, and the next file is refused when it would take the total over ``limit``."""

    def __init__(self, members, target, limit):
        self.members = members
        self.target = target
        self.limit = limit
        self.written = 0

    def __iter__(self):
        for info in self.members:
            if info.isreg() and self.written + info.size > self.limit:
                raise UnsafeArchive("it expands to more than %d bytes" % self.limit)
            yield info
            if info.isreg():
                self.written += os.lstat(os.path.join(self.target, info.name)).st_size


def _check_tree(root):
    """After extraction: only directories and regular files (d_type from the directory listing, no
    stat per file; links are not followed). Returns the number of files."""
    files, pending = 0, [root]
    while pending:
        with os.scandir(pending.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    files += 1
                else:
                    raise UnsafeArchive("extraction left %r, which is neither a file nor a directory"
                                        % os.path.relpath(entry.path, root))
    return files


_STREAM_ERRORS = (EOFError, zlib.error, lzma.LZMAError)  # a compressed stream cut short or altered


def _unreadable(exc):
    """One line: tarfile's own message for 'r:*' lists every compression it tried."""
    text = (str(exc).splitlines() or [""])[0].rstrip(":").strip() or type(exc).__name__
    if text == "file could not be opened successfully":
        text = "neither a tar nor a gzip, bzip2 or xz compressed tar"
    return UnreadableArchive("not a readable tar archive (%s)" % text)


def _check_end(archive):
    """tarfile ends its listing quietly at a header it cannot parse after the first member: the
    archive must end where the listing did (end-of-archive zeros or nothing), else it is corrupt.
    The stream is then read to its end (at most TRAILER_MAX_BYTES more), so that its compression's
    own checks (gzip's CRC and length, bzip2's and xz's) have seen every byte."""
    archive.fileobj.seek(archive.offset)
    block = archive.fileobj.read(512)
    if block.strip(b"\0"):
        raise UnreadableArchive("corrupt tar archive: an unreadable member header at byte %d" % archive.offset)
    trailer = len(block)
    while True:
        chunk = archive.fileobj.read(_COPY_BUFFER)
        if not chunk:
            return
        trailer += len(chunk)
        if trailer > TRAILER_MAX_BYTES:
            raise UnreadableArchive("more than %d bytes follow the end of the tar archive" % TRAILER_MAX_BYTES)


def _check_room(parent, expanded):
    free = shutil.disk_usage(parent).free
    if expanded + DISK_MARGIN_BYTES > free:
        raise NoRoom("it expands to %d bytes and %d are free under %s" % (expanded, free, parent))


def extract(fileobj, parent, *, limits=Limits(), select: Optional[Callable] = None,
            before_write: Optional[Callable[[int], None]] = None, tarmod=None):
    """Check every member of the tar in ``fileobj`` (any compression tarfile reads), then extract
    the ones ``select(info)`` keeps (all by default) into a new private directory under ``parent``.

    ``before_write(expanded_bytes)`` runs after the check and before anything is written (the
    caller's free-disk budget); then the expanded bytes must fit the free disk under ``parent``.
    Returns :class:`Extracted`; raises :class:`UnsafeArchive`, :class:`UnreadableArchive` or
    :class:`NoRoom`, leaving nothing behind.
    """
    tarmod = tarmod or tarfile_module()
    caps = dict(limits.file_caps or {})
    try:
        archive = _bounded_tarfile(tarmod).open(fileobj=fileobj, mode="r:*")
    except (tarmod.TarError, OSError) + _STREAM_ERRORS as exc:
        raise _unreadable(exc) from None
    with archive:
        archive.copybufsize = _COPY_BUFFER
        index = MemberIndex()
        wanted, count, expanded = [], 0, 0
        try:
            for info in archive:
                problem = member_problem(info) or index.problem(info)
                if problem:
                    raise UnsafeArchive("member %r %s" % (info.name[:200], problem))
                count += 1
                if count > limits.max_members:
                    raise UnsafeArchive("more than %d members" % limits.max_members)
                if info.isreg():
                    cap = caps.get(posixpath.basename(info.name), limits.max_bytes)
                    if info.size > cap:
                        raise UnsafeArchive("member %r is %d bytes, over the %d allowed" % (info.name[:200],
                                                                                          info.size, cap))
                if select is None or select(info):
                    expanded += info.size if info.isreg() else 0
                    if expanded > limits.max_bytes:
                        raise UnsafeArchive("it expands to more than %d bytes" % limits.max_bytes)
                    wanted.append(info)
            _check_end(archive)
        except (tarmod.TarError, OSError) + _STREAM_ERRORS as exc:
            raise _unreadable(exc) from None
        if before_write is not None:
            before_write(expanded)
        _check_room(parent, expanded)
        target = tempfile.mkdtemp(prefix=".extract-", dir=parent)
        try:
            members = _WithinCap(wanted, target, limits.max_bytes)
            archive.extractall(target, members=members, filter=_normalise(tarmod))
            files = _check_tree(target)
        except tarmod.FilterError as exc:  # the second layer refused what the first let through
            shutil.rmtree(target, ignore_errors=True)
            raise UnsafeArchive("refused by tarfile's data filter: %s" % exc) from None
        except (tarmod.TarError,) + _STREAM_ERRORS as exc:
            shutil.rmtree(target, ignore_errors=True)
            raise _unreadable(exc) from None
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
    return Extracted(target, files, members.written)
