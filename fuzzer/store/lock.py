"""One live campaign per store: the lock file beside it, taken by a campaign and checked by `merge`.

The kernel drops a `flock` when the process holding it dies, so a killed campaign's lock is taken
over by the next one; a reader (`merge`) only tests the lock, read-only, and creates nothing.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

from divfuzz.records.errors import StoreBusyError, StoreError
from divfuzz.records.safe_paths import open_plain


class CampaignLock:
    """One live campaign per store: an exclusive `flock` on `<store>.lock` next to it.

    The kernel drops the lock when the process holding it dies, so a killed campaign's lock is
    taken over by the next one (its stale pid stays in the file only until then). The file holds
    the holder's pid, host and start time, for the message a refused campaign prints.
    """

    def __init__(self, store_path: Path):
        self.store_path = Path(store_path)
        self.path = self.store_path.with_suffix(".lock")
        self.fd: int | None = None
        self.taken_over: dict | None = None  # the holder a killed run left in the file, if any

    def acquire(self) -> None:
        fd = open_plain(self.path, os.O_RDWR | os.O_CREAT, 0o644, what="campaign lock")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self._read(fd)
            os.close(fd)
            who = f"pid {holder.get('pid')} on {holder.get('host')}" if holder else "another process"
            raise StoreBusyError(
                f"{self.store_path}: another divfuzz campaign ({who}) is running on this store; "
                f"wait for it to finish or use another --out"
            ) from None
        except OSError:
            os.close(fd)
            raise
        self.taken_over = self._read(fd) or None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}).encode(), 0)
        self.fd = fd

    @staticmethod
    def _read(fd: int) -> dict:
        try:
            data = json.loads(os.pread(fd, 4096, 0) or b"{}")
            return data if isinstance(data, dict) else {}
        except (ValueError, RecursionError):
            return {}

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def refuse_if_live(path: Path) -> None:
    """A campaign still writing the store at `path` would make a copy of it torn: StoreError naming
    it. The lock file is only opened read-only, and only if it is there (nothing is created next to it)."""
    lock = path.with_suffix(".lock")
    if not lock.is_file():
        return
    fd = open_plain(lock, what="campaign lock")
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
    except BlockingIOError:
        raise StoreError(f"{path}: a divfuzz campaign is running on this store; merge it once it has finished") from None
    finally:
        os.close(fd)
