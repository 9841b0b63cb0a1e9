"""The one way divfuzz opens a file or folder inside a folder it reads or writes: `--out`, a store's
folder (`divfuzz.lock`, `divfuzz.sqlite`, `buckets/`), a corpus (`corpus/specs`).

Invariants:
- a symlink is never followed there: the last part is opened with `O_NOFOLLOW`, and every part
  between the trusted folder (`root`, which the user named) and it is checked with `lstat`;
- only a regular file or a folder is accepted: a FIFO, a socket or a device (a FIFO named
  `x.json` would block `open` for ever) is refused without blocking (`O_NONBLOCK`, then `fstat`);
- a file opened for writing in place is divfuzz's alone: one with other names (a hard link,
  `st_nlink > 1`, to a file anywhere on the disk) is refused before a byte is written;
- a refusal is `UnsafePathError` (exit 2) naming the path and what it is.
Paths a user names directly on the command line (`replay SPEC`, `--cluster-file`) may be
symlinks (the user chose them); they still must be regular files (`read_user_file`).
Torch-free and import-light: the store, the corpus, the CLI and the report writers share it.
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from pathlib import Path

from divfuzz.records.errors import UnsafePathError


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder"),
                       (stat.S_ISREG, "a regular file")):
        if test(mode):
            return name
    return "not a regular file or folder"


def _parts_below(root: Path | None, path: Path) -> list[Path]:
    """The folders from just below `root` down to `path`'s parent (all of them when no root)."""
    if root is None:
        return []
    try:
        rel = Path(os.path.normpath(path)).relative_to(os.path.normpath(root))
    except ValueError:
        raise UnsafePathError(f"{path}: outside {root}") from None
    if ".." in rel.parts:
        raise UnsafePathError(f"{path}: '..' leads outside {root}")
    return [Path(root).joinpath(*rel.parts[: i + 1]) for i in range(len(rel.parts) - 1)]


def _check_folder_parts(root: Path | None, path: Path, what: str) -> None:
    for part in _parts_below(root, path):
        try:
            mode = os.lstat(part).st_mode
        except FileNotFoundError:
            return  # the rest does not exist yet: nothing to follow
        if not stat.S_ISDIR(mode):
            raise UnsafePathError(f"{what} {path}: {part} is {_kind(mode)}, not a folder; refused and left as it is")


def check_plain(path: Path, *, root: Path | None = None, what: str = "file", folder: bool = False) -> bool:
    """True when `path` exists as a regular file (a folder with `folder`), False when absent;
    UnsafePathError for a symlink or anything else, at `path` or any part below `root`."""
    _check_folder_parts(root, path, what)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    ok = stat.S_ISDIR(mode) if folder else stat.S_ISREG(mode)
    if not ok:
        wanted = "a folder" if folder else "a regular file"
        raise UnsafePathError(f"{what} {path}: is {_kind(mode)}, not {wanted}; refused and left as it is")
    return True


def plain_folder(path: Path, *, root: Path | None = None, create: bool = False, what: str = "folder") -> Path:
    """`path` as a real folder (not a symlink to one), made when `create` and absent (its parents
    below `root` too, each checked)."""
    for part in [*_parts_below(root, path), Path(path)]:
        if not check_plain(part, what=what, folder=True):
            if not create:
                raise UnsafePathError(f"{what} {path}: {part} does not exist")
            try:
                os.mkdir(part)
            except FileExistsError:  # made by another process meanwhile: check what it is
                check_plain(part, what=what, folder=True)
    return Path(path)


_WRITING = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_TRUNC


def _hard_link_refused(what: str, path: Path, links: int) -> UnsafePathError:
    return UnsafePathError(f"{what} {path}: is a hard link ({links} names for one file): writing it would change "
                           "the file under its other names too; refused and left as it is")


def refuse_hard_link(path: Path, *, what: str = "file") -> None:
    """UnsafePathError when the file at `path` (not followed) has other names (`st_nlink > 1`): a
    file divfuzz writes in place (a store, its journals) must be its own, never another file's
    second name. Nothing when it is absent."""
    try:
        links = os.lstat(path).st_nlink
    except FileNotFoundError:
        return
    if links > 1:
        raise _hard_link_refused(what, Path(path), links)


def open_plain(path: Path, flags: int = os.O_RDONLY, mode: int = 0o644, *, root: Path | None = None, what: str = "file",
               follow: bool = False) -> int:
    """A file descriptor on the regular file `path` (created with `os.O_CREAT` in `flags`), never
    through a symlink (unless `follow`, for a path the user named) and never blocking on a FIFO.
    Opened for writing, a file with other names (a hard link, `st_nlink > 1`) is refused before
    anything is written or truncated (`O_TRUNC` is applied only after the check)."""
    _check_folder_parts(root, path, what)
    extra = os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | (0 if follow else os.O_NOFOLLOW)
    truncate = bool(flags & os.O_TRUNC)
    writing = bool(flags & _WRITING)
    try:
        fd = os.open(path, (flags & ~os.O_TRUNC) | extra, mode)
    except OSError as e:
        if e.errno == getattr(os, "ELOOP", 40) and not follow:
            raise UnsafePathError(f"{what} {path}: is a symlink; refused and left as it is") from None
        if e.errno == getattr(os, "ENXIO", 6):  # a FIFO opened for writing with no reader
            raise UnsafePathError(f"{what} {path}: is a FIFO, not a regular file; refused and left as it is") from None
        raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UnsafePathError(f"{what} {path}: is {_kind(st.st_mode)}, not a regular file; refused and left as it is")
    if writing and st.st_nlink > 1:
        os.close(fd)
        raise _hard_link_refused(what, Path(path), st.st_nlink)
    if truncate:
        os.ftruncate(fd, 0)
    os.set_blocking(fd, True)
    return fd


def read_bytes(path: Path, *, root: Path | None = None, what: str = "file", follow: bool = False) -> bytes:
    fd = open_plain(path, root=root, what=what, follow=follow)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def read_text(path: Path, *, root: Path | None = None, what: str = "file", follow: bool = False) -> str:
    """The text of a regular file (UTF-8); UnsafePathError for a symlink, a FIFO or a device."""
    return read_bytes(path, root=root, what=what, follow=follow).decode("utf-8")


def read_user_file(path: Path, *, what: str = "file") -> str:
    """A file the user named on the command line: symlinks followed, anything but a regular file refused."""
    return read_text(path, what=what, follow=True)


def write_text_plain(path: Path, text: str, *, root: Path | None = None, what: str = "file", mode: int = 0o644) -> Path:
    """Write `text` to `path` in place, created or truncated, through `open_plain` (no symlink
    followed, no hard link written through): a log, whose name nothing renames over."""
    fd = open_plain(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode, root=root, what=what)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
    return Path(path)


def write_atomic(path: Path, data: str | bytes, *, root: Path | None = None, what: str = "file", mode: int = 0o644) -> Path:
    """Write `path` whole or not at all: a temporary file beside it, fsynced, renamed over it. An
    existing symlink or non-regular file there is refused, not replaced or followed."""
    check_plain(path, root=root, what=what)
    folder = Path(path).parent
    fd, tmp = tempfile.mkstemp(prefix=f".{Path(path).name}.", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return Path(path)


def copy_plain_tree(origin: Path, dest: Path, *, what: str = "folder") -> int:
    """Copy the folder `origin` to `dest` (which must not exist): its folders and regular files,
    each opened as `open_plain` does (never through a symlink, never blocking); a symlink in it is
    left out (it never leads outside `origin`); a FIFO, a socket or a device is refused
    (UnsafePathError naming it and what it is) before anything is read from it, so a character
    device such as /dev/zero is never read until a disk is full. Returns the files copied."""
    os.mkdir(dest)
    copied = 0
    for entry in sorted(os.scandir(origin), key=lambda e: e.name):
        source, target = Path(entry.path), Path(dest) / entry.name
        mode = entry.stat(follow_symlinks=False).st_mode
        if stat.S_ISLNK(mode):
            continue
        if stat.S_ISDIR(mode):
            copied += copy_plain_tree(source, target, what=what)
        elif stat.S_ISREG(mode):
            fd = open_plain(source, what=what)
            with os.fdopen(fd, "rb") as src, open(target, "xb") as out:
                while chunk := src.read(1 << 20):
                    out.write(chunk)
                os.chmod(target, stat.S_IMODE(os.fstat(src.fileno()).st_mode) & 0o755)
            copied += 1
        else:
            raise UnsafePathError(f"{what}: {source} is {_kind(mode)}, not a regular file or folder; refused without reading it")
    return copied


def remove_made(made: list[Path], lock: Path | None) -> None:
    """Undo a refused command's folder work: `lock` (one it created; None to keep it) is removed,
    and the folders of `made` (outermost first, as they were created) are removed innermost first
    while they are still empty."""
    if lock is not None:
        lock.unlink(missing_ok=True)
    for folder in reversed(made):
        try:
            folder.rmdir()
        except OSError:
            break


SLUG_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")


def is_slug(name: str) -> bool:
    """A name safe for any file system and shell: ASCII letters, digits, `_` and `-`, not starting
    with `-` or `_`, at most 100 characters (so never `.`, `..`, a path or a hidden file)."""
    return isinstance(name, str) and SLUG_PATTERN.fullmatch(name) is not None


def slugify(text: str, *, limit: int = 60) -> str:
    """`text` as a slug (runs of other characters become `-`); '' when nothing usable is left."""
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", text).strip("-_")[:limit].strip("-_")
    return slug if is_slug(slug) else ""


def child_path(root: Path, name: str, *, what: str = "name") -> Path:
    """`root / name`, refused unless `name` is a slug (with an optional `.json`/`.py` suffix)
    and the path resolves inside `root` (a symlink there pointing elsewhere is refused too)."""
    stem, _, suffix = name.partition(".")
    if not is_slug(stem) or suffix not in ("", "json", "py"):
        raise UnsafePathError(
            f"{what} {name!r} is not a safe file name (letters, digits, '_' and '-', starting with a letter or digit)"
        )
    path = root / name
    resolved_root = root.resolve()
    if path.resolve().parent != resolved_root:
        raise UnsafePathError(f"{what} {name!r}: {path} resolves to {path.resolve()}, outside {resolved_root}")
    return path
