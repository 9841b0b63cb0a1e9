"""The workers' Inductor (and Triton) cache: a folder of this user's own, never one a store carries.

Inductor's cache holds pickles and Python kernels that a compile loads and runs. A store folder is
data from anyone (a shard to merge, a nightly to resume, a folder attached to a bug report), so a
cache inside it would run its author's code in every worker (issue 40: a planted FX-graph pickle
ran `os.system` on `fuzz --out THAT_FOLDER`). The cache lives under the user's cache home instead:
`$XDG_CACHE_HOME/divfuzz/compile-cache/torch-<version>-<device>` (`~/.cache` when XDG_CACHE_HOME is
unset or relative), one folder per torch version and device (the CPU's vector ISA for the CPU).

Invariants:
- every folder from `divfuzz/` down is a real folder (not a symlink), owned by this user and
  writable by no one else; an absent one is made 0700; anything else is refused
  (`UnsafePathError`, exit 2, naming the folder and why), never repaired, followed or used;
- a `compile-cache/` folder inside a store folder (written there by divfuzz before issue 40, or
  planted) is never read: nothing points a worker at it, and a TORCHINDUCTOR_CACHE_DIR or
  TRITON_CACHE_DIR the user set that lies inside the store folder is refused (`refuse_a_cache_inside`);
- a compile error raised while Inductor read its cache (`came_from_cache_read`) is never filed as
  the compiler's: the case compiles again with the caches off (`divfuzz.fuzzer.engine.execute`),
  and when that compile succeeds the cache is reported as corrupt (`divfuzz.records.errors.CompileCacheError`), naming it.
Torch-free: the campaign imports it before any worker starts.
"""

from __future__ import annotations

import os
import stat
import traceback
from pathlib import Path

from divfuzz.records.errors import UnsafePathError
from divfuzz.records.safe_paths import slugify

# The folder under `divfuzz/` in the user's cache home (and the old name beside a store, now ignored).
COMPILE_CACHE = "compile-cache"



def cache_home() -> Path:
    """The user's cache home: $XDG_CACHE_HOME when it is an absolute path (the XDG rule), else ~/.cache."""
    value = os.environ.get("XDG_CACHE_HOME", "")
    return Path(value) if os.path.isabs(value) else Path(os.path.expanduser("~")) / ".cache"


def private_folder(path: Path) -> Path:
    """`path` as a folder only this user can write: made 0700 when absent; refused (UnsafePathError)
    when it is a symlink or not a folder, owned by another user, or writable by group or others."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    why = None
    if stat.S_ISLNK(st.st_mode):
        why = "is a symlink"
    elif not stat.S_ISDIR(st.st_mode):
        why = "is not a folder"
    elif st.st_uid != os.getuid():
        why = f"is owned by uid {st.st_uid}, not by this user (uid {os.getuid()})"
    elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        why = f"is writable by {'group and others' if st.st_mode & stat.S_IWGRP and st.st_mode & stat.S_IWOTH else 'its group' if st.st_mode & stat.S_IWGRP else 'others'} (mode {stat.S_IMODE(st.st_mode):o})"
    if why is not None:
        raise UnsafePathError(
            f"the compile cache folder {path} {why}: Inductor loads and runs code from its cache, so divfuzz uses "
            f"only a folder this user alone can write; refused and left as it is (fix or remove it, or set "
            f"TORCHINDUCTOR_CACHE_DIR)")
    return Path(path)


# The environment variables that name a folder whose files a compile loads and runs.
CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def refuse_a_cache_inside(out_dir: Path, *, option: str = "--out") -> None:
    """A cache folder the user named (`CACHE_VARIABLES`) that lies inside `out_dir`, a store folder
    (a received one's `compile-cache/`, say), is refused: its files came with the folder, from
    whoever wrote it, and ownership proves nothing (unpacking an archive makes every file the
    user's). UnsafePathError naming the variable, the folder and `option`; checked before any
    worker starts. Symlinks are resolved on both sides, so a link into the folder is caught too."""
    root = Path(os.path.realpath(out_dir))
    for name in CACHE_VARIABLES:
        value = os.environ.get(name)
        if not value:
            continue
        cache = Path(os.path.realpath(value))
        if cache == root or root in cache.parents:
            raise UnsafePathError(
                f"{name}={value} lies inside {option} {out_dir}: a store folder is data from anyone, and a compile "
                f"loads and runs code from its cache; refused before any worker started (point {name} at a folder "
                f"outside {out_dir}, or unset it for divfuzz's own private cache)")


def cache_folder_name(versions: dict, device: str) -> str:
    """`torch-<version>-<device>`: never mixes torch versions or devices (CPU: its vector ISA)."""
    where = f"cuda-{versions.get('gpu')}" if device.startswith("cuda") else f"cpu-{versions.get('cpu_capability')}"
    return slugify(f"torch-{versions.get('torch')}-{where}".replace(".", "_"), limit=100)


def private_compile_cache(versions: dict, device: str) -> Path:
    """The workers' cache folder for these versions and device, each folder from `divfuzz/` down
    made or checked by `private_folder` (the cache home itself is made 0700 when absent)."""
    home = cache_home()
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    folder = home
    for part in ("divfuzz", COMPILE_CACHE, cache_folder_name(versions, device)):
        folder = private_folder(folder / part)
    return folder


# Functions of Inductor's FX-graph cache and AOTAutograd's cache that read an entry back (unpickle
# it, evaluate its guards, load its kernels): an error raised under one of them may be the cache's.
_CACHE_READ_FRAMES = {
    "codecache.py": {"find_guarded_entry", "iterate_over_candidates", "_lookup_graph", "load_with_key",
                     "_load_graph", "load_by_key_path", "post_compile"},
    "autograd_cache.py": {"try_load", "_lookup", "wrap_post_compile", "post_compile"},
}


def came_from_cache_read(e: BaseException) -> bool:
    """Whether `e`, or an exception it carries (`inner_exception`, `__cause__`, `__context__`), was
    raised under a frame that reads Inductor's or AOTAutograd's cache."""
    seen: list[BaseException] = []
    todo = [e]
    while todo and len(seen) < 16:
        x = todo.pop()
        if any(x is s for s in seen):
            continue
        seen.append(x)
        for frame in traceback.extract_tb(x.__traceback__):
            if frame.name in _CACHE_READ_FRAMES.get(os.path.basename(frame.filename), ()):
                return True
        todo += [c for c in (getattr(x, "inner_exception", None), x.__cause__, x.__context__) if isinstance(c, BaseException)]
    return False
