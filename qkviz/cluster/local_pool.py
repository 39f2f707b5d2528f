"""The local pool of worker processes (``--jobs N``): spawned, persistent, one BLAS and one torch thread each."""

from __future__ import annotations

import multiprocessing
import signal
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Callable

from qkviz.core.errors import QkvizError

#: what a script that starts worker processes needs, or what to do instead
GUARD = "put the script's qkviz calls under 'if __name__ == \"__main__\":'"


#: the environment variables that set the number of threads of a BLAS library, or of OpenMP (torch's intra-op
#: threads among them), when it is loaded
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS", "OMP_NUM_THREADS")


def start_quiet_worker(niceness: int = 0) -> None:
    """Worker start-up: leave Ctrl-C to the parent, end with it, use one BLAS thread and one torch thread (a worker
    is one core's share; more threads than cores make OpenBLAS spin: a 2 ms PCA took 0.5 s), and lower its priority
    by ``niceness`` (background work yields to the app). The BLAS libraries loaded already (numpy's, and scipy's own
    OpenBLAS: ``qkviz.cluster`` imports it) are limited here, and torch if the main script imported it (a spawned
    worker imports the script again); any loaded later reads :data:`BLAS_THREAD_VARIABLES`, set to 1 here. The
    process that starts the pool keeps its own threads."""
    import os

    import numpy  # noqa: F401  (its BLAS loaded, so that the limit below reaches it)
    from threadpoolctl import threadpool_limits

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    end_with_parent()
    os.environ.update(dict.fromkeys(BLAS_THREAD_VARIABLES, "1"))
    threadpool_limits(1)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
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


def check_spawn_safe(instead: str = "use jobs=1") -> None:
    """Refuse in one :class:`QkvizError` line, before any worker starts, to spawn workers from a script without an
    ``if __name__ == "__main__":`` guard: a spawned worker imports the main script again, so the script's qkviz
    calls would run in every worker, and the pool would break with a worker that ended for no clear reason.

    Let through: notebooks and interactive sessions (no ``__main__.__file__``), ``python -c``, ``python -m
    package`` (the main module has a spec; multiprocessing imports it by name) and any script whose text names
    ``__main__`` (it has a guard; console scripts such as ``qkviz`` and ``pytest`` do)."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if path is None or getattr(main, "__spec__", None) is not None:
        return
    try:
        source = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:        # not a readable file (a frozen program, a zip): multiprocessing copes or says so
        return
    if "__main__" in source:
        return
    raise QkvizError(f"{path} has no 'if __name__ == \"__main__\":' guard, and each worker process starts by running "
                     f"the script again (the spawn start method): {GUARD}, or {instead}")


def local_pool(jobs: int, initializer: Callable = start_quiet_worker, initargs: tuple = ()) -> ProcessPoolExecutor:
    """A persistent pool of ``jobs`` worker processes, spawned (no state forked from the parent), each started
    by ``initializer(*initargs)``; refused from a script without a ``__main__`` guard (:func:`check_spawn_safe`)."""
    check_spawn_safe("use jobs=1" if jobs > 1 else "start it from the qkviz command")
    return ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                               initializer=initializer, initargs=initargs)
