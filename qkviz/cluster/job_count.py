"""How many local worker processes per-head work uses: the number asked for, or by default the cores this process may
use, where the work is worth starting them.

``qkviz.compute_stats``, ``qkviz.project`` and ``qkviz stats | project`` take ``jobs=None`` (no ``--jobs``) as
"use the machine": :func:`resolve_jobs` turns it into a number before any worker starts. A spawned worker costs
seconds to start (a fresh interpreter importing numpy, pandas and qkviz), so work estimated to take less than that
runs in this process; a script without a ``__main__`` guard (whose workers would run it again) also runs its heads
here, with a warning, instead of failing as an explicit ``jobs=2`` does. Whichever number is used, the results are
the same: every head is one pure task, assembled in (layer, head) order.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from qkviz.cluster.local_pool import check_spawn_safe
from qkviz.core.errors import QkvizError

if TYPE_CHECKING:
    from distributed import Client

logger = logging.getLogger(__name__)

#: seconds a spawned pool takes before its first result (interpreters started and qkviz imported, in parallel): about
#: 3 s on the project's idle 2-core machine, more under load; the default runs heads here below what it would save
POOL_START_SECONDS = 3.0


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity where the system has one (a container's or ``taskset``'s
    share), else the machine's CPU count."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except AttributeError:          # no sched_getaffinity (macOS, Windows)
        return os.cpu_count() or 1


#: the most worker processes of a local pool: one per core this process may use
MAX_JOBS = usable_cores()


def check_jobs(jobs: int | None, client: "Client | None") -> None:
    """One :class:`QkvizError` line for a number of local worker processes out of range, or given with a client
    (``None``, the default, is always accepted)."""
    if jobs is None:
        return
    if client is not None and jobs != 1:
        raise QkvizError(f"jobs={jobs} is for local worker processes: with a Dask client the cluster's workers run the "
                         "heads; leave jobs out")
    if not 1 <= jobs <= MAX_JOBS:
        raise QkvizError(f"jobs must be between 1 and {MAX_JOBS} (the cores this process may use): more processes "
                         f"than cores are slower, not faster; got {jobs}")


def default_jobs(estimated_seconds: float | None = None) -> int:
    """The jobs of ``jobs=None``: :func:`usable_cores`, or 1 (the heads run in this process) where there is one core,
    where the work's estimated serial time would save less than :data:`POOL_START_SECONDS` on every core, or where the
    main script has no ``__main__`` guard (logged as a warning naming the guard)."""
    cores = usable_cores()
    if cores < 2:
        return 1
    if estimated_seconds is not None and estimated_seconds * (1 - 1 / cores) <= POOL_START_SECONDS:
        return 1
    try:
        check_spawn_safe("give jobs=1 to run them here without this warning")
    except QkvizError as error:
        logger.warning("the heads run in this process, on one core: %s", error)
        return 1
    return cores


def resolve_jobs(jobs: int | None, client: "Client | None" = None, estimated_seconds: float | None = None) -> int:
    """The number of local worker processes to run with: ``jobs`` as given (checked by :func:`check_jobs`), 1 with a
    Dask ``client`` (its workers run the heads), else :func:`default_jobs` of the work's ``estimated_seconds``."""
    check_jobs(jobs, client)
    if jobs is not None:
        return jobs
    return 1 if client is not None else default_jobs(estimated_seconds)
