"""Writing user-visible files safely: check before the work, write atomically after it.

Example:
    >>> check_can_write(Path("perf/baseline.json"), "--write-baseline")  # doctest: +SKIP
    >>> atomic_write(Path("perf/baseline.json"), b"{}")  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import importlib.metadata
import json
import os
import re
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from yolo_edge.core.codec import dumps
from yolo_edge.core.errors import YoloEdgeError


def cache_root() -> Path:
    """The user's yolo-edge cache: ``$YOLO_EDGE_CACHE``, else ``$XDG_CACHE_HOME/yolo-edge`` (``~/.cache/yolo-edge``).
    Quantized graphs, the demo validation set and the toolchain environments live under it."""
    return Path(
        os.environ.get("YOLO_EDGE_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "yolo-edge"
    )


def toolchains_root() -> Path:
    """Where toolchain environments live: ``$YOLO_EDGE_TOOLCHAINS``, else ``toolchains/`` in the yolo-edge cache."""
    root = Path(os.environ.get("YOLO_EDGE_TOOLCHAINS") or cache_root() / "toolchains")
    if root.exists() and not root.is_dir():
        raise YoloEdgeError(f"YOLO_EDGE_TOOLCHAINS={root} is a file; point it at a folder (or unset it)")
    return root


def package_versions(*packages: str) -> str:
    """``name=version`` of each installed package (``none`` if absent), for cache keys: an entry made by another
    release of the tool that made it is another entry, never read as this one's."""
    found = []
    for package in packages:
        try:
            found.append(f"{package}={importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{package}=none")
    return ",".join(found)


def regular_file(path: Path, what: str, max_bytes: int) -> os.stat_result:
    """``path``'s stat where it is a regular file (a symlink is followed) of at most ``max_bytes``: a folder, a FIFO
    or a device (``/dev/zero``) is refused before it is opened, so it cannot hang or exhaust memory, and a larger
    file is refused; each a one-line error naming ``what``."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise YoloEdgeError(f"{what} not found: {printable(path, 300)}") from None
    except OSError as exc:
        raise YoloEdgeError(f"{what} {printable(path, 300)}: cannot read it ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file (a FIFO, socket or device)"
        raise YoloEdgeError(f"{what} {printable(path, 300)} is {kind}; name a file")
    if st.st_size > max_bytes:
        raise YoloEdgeError(f"{what} {printable(path, 300)} is {st.st_size} bytes, more than the {max_bytes} allowed")
    return st


def read_regular(path: Path, what: str, max_bytes: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``max_bytes`` (:func:`regular_file` refuses anything else)."""
    st = regular_file(path, what, max_bytes)
    try:
        with open(path, "rb") as f:
            # the size it had, and a byte more to see it grow (asking for max_bytes would allocate all of it)
            data = f.read(min(st.st_size, max_bytes) + 1)
    except OSError as exc:
        raise YoloEdgeError(f"{what} {path}: cannot read it ({exc.strerror})") from None
    if len(data) > min(st.st_size, max_bytes):  # it grew since the stat
        raise YoloEdgeError(f"{what} {path} grew while it was read; read it again when it is written")
    return data


def is_mount_point(path: Path, mountinfo: Path = Path("/proc/self/mountinfo")) -> bool:
    """Whether ``path`` is where a file system is mounted: ``os.path.ismount``, which compares devices and misses a
    bind mount of a folder of the same file system, or a mount point the kernel lists (``mountinfo``)."""
    real = os.path.realpath(path)
    if os.path.ismount(real):
        return True
    try:
        with open(mountinfo, "rb") as f:
            table = f.read(1 << 24)
    except OSError:  # not Linux
        return False
    target = os.fsencode(real)
    for line in table.splitlines():
        fields = line.split(b" ")
        # field 5 is the mount point, with space, tab, newline and backslash written as octal escapes
        if len(fields) > 4 and re.sub(rb"\\([0-7]{3})", lambda m: bytes([int(m[1], 8)]), fields[4]) == target:
            return True
    return False


def check_can_write(path: Path, what: str) -> None:
    """Fail now, before minutes of work, if the file ``path`` cannot be written (tried for real: root ignores modes)."""
    check_name_lengths(path, what)
    if path.is_dir():
        raise YoloEdgeError(f"{what} {path} is a folder; name a file")
    if path.exists() and not path.is_file():  # a FIFO blocks the writer, a device takes no rename of a new file
        raise YoloEdgeError(f"{what} {path} is not a regular file (a FIFO, socket or device); name a file")
    folder = path.absolute().parent
    if not folder.is_dir():
        raise YoloEdgeError(f"{what} {path}: the folder {folder} does not exist")
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise YoloEdgeError(f"{what} {path}: cannot write in {folder} ({exc.strerror})") from None


def refuse_special(path: Path, what: str = "output") -> None:
    """A one-line error if ``path`` is a device, FIFO or socket (a symlink is followed): a rename onto it would
    replace the node itself (as root, ``/dev/null`` for the whole system), and writing into it is not a file."""
    try:
        st = os.stat(path)
    except OSError:  # absent (or unreachable: the write that follows says so)
        return
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        raise YoloEdgeError(f"{what} {printable(path)} is not a regular file (a FIFO, socket or device); name a file")


def temp_beside(path: Path) -> tuple[int, str]:
    """A new temporary file in ``path``'s folder whose name fits the file system's 255-byte limit whatever the
    length of ``path``'s own name (a name a few bytes under the limit must not fail only after the work)."""
    stem = os.fsencode(path.name)[:64].decode(errors="ignore")
    return tempfile.mkstemp(prefix=f".{stem}.", dir=path.absolute().parent)


NAME_MAX = 255  # bytes of one name in a path, on the file systems yolo-edge writes to


def check_name_lengths(path: str | Path, what: str = "output") -> None:
    """A one-line error if a name in ``path`` is longer than the file system takes (:data:`NAME_MAX` bytes): said
    before any work, from Python as from the CLI, not a raw ``OSError`` after it."""
    for part in Path(path).parts:
        if len(os.fsencode(part)) > NAME_MAX:
            raise YoloEdgeError(
                f"{what} {printable(path, 200)}: the name {printable(part, 60)} is {len(os.fsencode(part))} bytes, "
                f"over the {NAME_MAX} a file system takes; use a shorter one"
            )


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file beside it: readers see the old file or the new one. A
    device, FIFO or socket at ``path`` is refused (:func:`refuse_special`), never replaced; a name too long for the
    file system is a one-line error."""
    check_name_lengths(path)
    refuse_special(path)
    fd, tmp = temp_beside(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _entry_digest(path: Path, data: bytes) -> str:
    """The digest a cache entry is stored with: of its name (the key: what the entry is of) and its bytes, so an
    entry copied over another key with its digest reads as damaged, not as that key's (integrity and identity)."""
    return hashlib.sha256(path.name.encode() + b"\0" + data).hexdigest()


def _cache_warning(path: Path, what: str) -> None:
    print(f"yolo-edge: WARNING: cache entry {printable(path)} {what}", file=sys.stderr)


def read_cached(path: Path) -> bytes | None:
    """The cache entry ``path`` written by :func:`write_cached`, verified against its digest: None when absent;
    a damaged entry (truncated, swapped, copied from another key, its digest missing) is deleted with a warning,
    and the caller rebuilds it: a bad entry costs one rebuild, never every later run. A cache that cannot be read
    is a cache without the entry (a warning): the cache is an optimisation, never a reason to stop."""
    digest = path.with_name(f"{path.name}.sha256")
    try:
        if not path.is_file():
            return None
        data = path.read_bytes()
        want = digest.read_text().strip() if digest.is_file() else None
    except OSError as exc:
        _cache_warning(path, f"is unreadable ({exc.strerror}); going on without it ({CACHE_HINT})")
        return None
    if want != _entry_digest(path, data):
        _cache_warning(path, "is damaged (its digest does not match its key and bytes); rebuilding it")
        try:
            path.unlink(missing_ok=True)
            digest.unlink(missing_ok=True)
        except OSError:
            pass  # a read-only cache: the rebuilt entry is not stored either (write_cached says so)
        return None
    return data


CACHE_HINT = "set YOLO_EDGE_CACHE to a writable folder to keep results between runs"
NO_ROOM = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)  # a write that fails for lack of room, not of permission


def write_cached(path: Path, data: bytes) -> None:
    """``data`` as the cache entry ``path`` with its digest beside it, each written atomically (the digest
    last: an entry without one is damaged). A cache that cannot be written (read-only, not a folder, no
    permission) is a warning and the work goes on uncached; a full disk stops the command (one line, cli.main)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, data)
        atomic_write(path.with_name(f"{path.name}.sha256"), _entry_digest(path, data).encode())
    except OSError as exc:
        if exc.errno in NO_ROOM:  # the disk is full: so is TMPDIR, likely, and the next write fails anyway
            raise
        _cache_warning(path, f"is not stored ({exc.strerror}); going on uncached ({CACHE_HINT})")


def printable(name: object, limit: int = 100) -> str:
    """A name or message as it may reach a terminal or a log: control characters (newlines, ESC sequences that
    forge output lines, set a terminal's title or clear it) become ``?``, and it is cut at ``limit`` characters
    (a class name at 100; an error line, which may quote a megabyte of config, longer). Class names come from an
    ONNX file, which may be someone else's; file names are any bytes (undecodable ones are ``?`` too)."""
    clean = "".join(c if c.isprintable() else "?" for c in str(name))
    return clean if len(clean) <= limit else f"{clean[: limit - 30]}... ({len(clean) - limit + 30} characters cut)"


class JsonArrayWriter:
    """A JSON array written record by record (memory stays flat on an endless stream) into a temporary file beside
    ``path``, renamed onto it by :meth:`close`: ``path`` holds a whole array or what it held before. A write that
    fails (a full disk) raises for that record and every later one (each is a frame its sink lost), and ``close``
    then removes the temporary file and leaves ``error`` saying why, instead of raising."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        refuse_special(self.path)
        fd, tmp = temp_beside(self.path)
        self._tmp = Path(tmp)
        self._file = os.fdopen(fd, "w", encoding="utf-8")
        self._count = 0
        self.error: str | None = None
        self._write("[")

    def _write(self, text: str) -> None:
        if self.error is not None:
            raise OSError(errno.EIO, self.error)
        try:
            self._file.write(text)
            self._file.flush()  # a full disk fails this record, not a later one or the close
        except OSError as exc:
            self.error = f"{printable(self.path)}: {exc.strerror or exc}; it keeps what it held before this run"
            raise

    def add(self, record: object) -> None:
        self._write(("," if self._count else "") + "\n" + dumps(record, indent=None))
        self._count += 1

    def close(self) -> None:
        if self._file.closed:
            return
        try:
            self._write("\n]\n")
            os.fsync(self._file.fileno())
            self._file.close()
            os.replace(self._tmp, self.path)
        except OSError as exc:
            if self.error is None:
                self.error = f"{printable(self.path)}: {exc.strerror or exc}; it keeps what it held before this run"
            with contextlib.suppress(OSError):
                self._file.close()
            self._tmp.unlink(missing_ok=True)


def json_loads(data: str | bytes) -> Any:
    """``json.loads``, with a document nested too deep for the parser (a few hundred KB of ``[[[[``) a
    :class:`json.JSONDecodeError` like any other malformed one, not a RecursionError traceback."""
    try:
        return json.loads(data)
    except RecursionError:
        raise json.JSONDecodeError("nested too deep", data if isinstance(data, str) else "", 0) from None
