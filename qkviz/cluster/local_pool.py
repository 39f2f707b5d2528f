"""The local pool of worker processes (``--jobs N``): spawned, persistent, one BLAS thread each."""

from __future__ import annotations

import multiprocessing
import signal
from concurrent.futures import ProcessPoolExecutor
from typing import Callable


def start_quiet_worker(niceness: int = 0) -> None:
    """Worker start-up: leave Ctrl-C to the parent, end with it, use one BLAS thread (a worker is one core's
    share; more threads than cores make OpenBLAS spin: a 2 ms PCA took 0.5 s), and lower its priority by
    ``niceness`` (background work yields to the app)."""
    import os

    from threadpoolctl import threadpool_limits

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    end_with_parent()
    threadpool_limits(1)
    if niceness:
        os.nice(niceness)


def end_with_parent() -> None:
    """On Linux, have the kernel end this worker when the process that started it dies (even by SIGKILL)."""
    import ctypes
    import os

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)          # PR_SET_PDEATHSIG
    except (OSError, AttributeError):         # not Linux: the pool's own shutdown ends the workers
        return
    if os.getppid() == 1:                      # the parent died before the call
        os._exit(1)


def local_pool(jobs: int, initializer: Callable = start_quiet_worker, initargs: tuple = ()) -> ProcessPoolExecutor:
    """A persistent pool of ``jobs`` worker processes, spawned (no state forked from the parent), each started
    by ``initializer(*initargs)``."""
    return ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                               initializer=initializer, initargs=initargs)
