"""Writing a bundle: atomically (a temp folder beside it, then exchanged with the old one in one step), and only ever
over a folder that deploy wrote (its manifest lists every file), never a user's."""

from __future__ import annotations

import ctypes
import errno
import glob
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from yolo_edge.bundle.layout import MANIFEST
from yolo_edge.core.errors import YoloEdgeError
from yolo_edge.core.files import check_name_lengths, is_mount_point, json_loads, read_regular


def is_bundle(path: Path) -> bool:
    """Whether ``path`` is a folder that yolo-edge wrote as a bundle (any format): its meta.json says so."""
    try:
        meta = json_loads((path / "meta.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and "yolo_edge" in meta and (path / "plan.json").is_file()


def foreign_entries(bundle: Path) -> list[str]:
    """What is in the folder ``bundle`` that write_bundle did not put there (by its manifest; every entry when it has
    none): a baseline, annotated images or notes a user saved inside it, which replacing the bundle would delete."""
    try:
        listed = set(read_regular(bundle / MANIFEST, "the bundle's file list", 1 << 20).decode().splitlines())
    except (YoloEdgeError, UnicodeDecodeError):
        listed = set()
    ours = listed | {str(parent) for rel in listed for parent in Path(rel).parents}
    found = []
    for root, dirs, files in os.walk(bundle):  # symlinks are listed, never followed
        for name in [*dirs, *files]:
            rel = os.path.relpath(os.path.join(root, name), bundle)
            if rel not in ours:
                found.append(rel)
    return sorted(found)


def check_writable(out: Path) -> None:
    """Fail early, before any work, when ``out`` cannot be created (tried for real: root ignores modes), or
    when it exists and is anything but an empty folder or a bundle: deploy replaces a bundle, never a user's folder."""
    check_name_lengths(out, "--out")
    if out.exists() and not out.is_dir():
        raise YoloEdgeError(f"cannot write the bundle to {out}: it is a file; pick another --out")
    if is_mount_point(out):
        raise YoloEdgeError(
            f"cannot write the bundle to {out}: it is a mount point, which cannot be replaced as a whole; "
            f"name a folder inside it (--out {Path(out) / 'bundle'})"
        )
    here = Path.cwd()
    if Path(os.path.abspath(out)) in (here, *here.parents):
        raise YoloEdgeError(
            f"cannot write the bundle to {out}: it is the current folder or one above it; pick another --out"
        )
    if out.is_dir() and not is_bundle(out):
        entries = sorted(p.name for p in out.iterdir())
        if entries:
            raise YoloEdgeError(
                f"cannot write the bundle to {out}: it is a folder that is not a yolo-edge bundle ({_few(entries)}), "
                "and deploy only ever replaces a bundle; pick another --out"
            )
    elif out.is_dir():
        foreign = foreign_entries(out)
        if foreign and not (out / MANIFEST).is_file():
            raise YoloEdgeError(
                f"cannot replace the bundle {out}: an older yolo-edge wrote it without a file list, so deploy cannot "
                "tell files saved inside it from its own; delete it yourself or pick another --out"
            )
        if foreign:
            raise YoloEdgeError(
                f"cannot replace the bundle {out}: it holds files deploy did not write ({_few(foreign)}), which "
                "replacing it would delete; move them out of it or pick another --out"
            )
    probe = out.absolute().parent
    while not probe.exists():
        probe = probe.parent
    try:
        if not probe.is_dir():
            raise NotADirectoryError(probe)
        with tempfile.TemporaryDirectory(dir=probe):
            pass
    except OSError:
        raise YoloEdgeError(
            f"cannot write the bundle to {out}: {probe} is not a writable folder; pick another --out"
        ) from None


def _few(names: Sequence[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def write_bundle(out: str | Path, files: Mapping[str, bytes]) -> Path:
    """Write ``files`` (relative path -> bytes) as the directory ``out``, atomically: into a temp dir beside it, then
    exchanged with the old bundle in one step (:func:`exchange`), so a kill at any moment leaves the old bundle or the
    new one at ``out``, never none and never half a bundle. A temp folder a killed writer left beside ``out`` is
    removed by the next write (:func:`_remove_orphans`)."""
    out = Path(os.path.realpath(out))  # through a symlink: the bundle it names is the one replaced
    check_writable(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    _remove_orphans(out)
    tmp = Path(tempfile.mkdtemp(prefix=f"{temp_prefix(out)}{os.getpid()}-", dir=out.parent))
    try:
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes it 0700; a bundle is shared like any folder the user makes
        for rel, data in files.items():
            path = tmp / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        (tmp / MANIFEST).write_text("".join(f"{rel}\n" for rel in sorted([*files, MANIFEST])))
        if not (out.exists() and exchange(tmp, out)):
            if out.exists():  # a file system without the exchange: two renames, the old one kept under tmp's name
                old = tmp.with_name(f"{tmp.name}-old")
                os.replace(out, old)
                os.replace(tmp, out)
                tmp = old
            else:
                os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the new bundle if it failed, else the old one
    return out


def temp_prefix(out: Path) -> str:
    """The start of the names of ``out``'s temp folders: short enough for any name's temp to fit in 255 bytes."""
    return f".{os.fsencode(out.name)[:64].decode(errors='ignore')}.yolo-edge-"


_RENAME_EXCHANGE, _AT_FDCWD = 2, -100


def exchange(a: Path, b: Path) -> bool:
    """Swap the paths ``a`` and ``b`` in one atomic step (Linux ``renameat2(RENAME_EXCHANGE)``); False where the
    kernel, libc or file system has no such call (the caller renames twice)."""
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _remove_orphans(out: Path) -> None:
    """Remove the temp folders of ``out`` whose writer is gone (killed mid-write: SIGKILL, power): their name
    carries the writer's pid, and no live process has it."""
    prefix = temp_prefix(out)
    for entry in out.parent.glob(f"{glob.escape(prefix)}*"):
        pid = entry.name[len(prefix) :].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)) and entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
