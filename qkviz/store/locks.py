"""Advisory file locks, so that two processes never write the same thing at once.

The lock is ``fcntl.flock`` on a small lock file beside what it guards; the operating system releases
it when the holder exits or dies, so a killed process never leaves a stale lock behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Iterator

from qkviz.core.errors import QkvizError


class LockBusy(QkvizError):
    """The lock is held by another process (raised only when not waiting)."""


@contextlib.contextmanager
def exclusive_lock(path: str | Path, wait: bool = True, busy_message: str = "") -> Iterator[None]:
    """Hold an exclusive lock on the file ``path`` (created if missing) while the block runs.

    With ``wait=False`` a lock held by another process is a :class:`QkvizError` carrying ``busy_message``
    instead of a wait (a :class:`LockBusy`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            raise LockBusy(busy_message or f"{path} is locked by another process") from None
        yield
    finally:
        os.close(descriptor)   # closing releases the lock
