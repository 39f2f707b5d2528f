"""Running per-head work: here, on a local pool of worker processes (``--jobs``) or on a Dask cluster (``--dask``).

The projection, the head atlas and the search indexes each run one pure task per head (run path, layer, head,
parameters -> result) through the one executor, :class:`HeadRunner` (``head_runner.py``); behind it, naming and
reaching a cluster, checking that its workers see the run, submitting the tasks with readable keys and retries
(``dask_cluster.py``), how many local workers to use (``job_count.py``: by default the cores this process may use)
and the local pool's worker start-up (``local_pool.py``).
``dask`` and ``distributed`` (the ``dask`` extra) are imported here only, and only when a cluster is asked for.
"""

from typing import TYPE_CHECKING

from qkviz.cluster.background_call import BackgroundCall
from qkviz.cluster.dask_cluster import (CONNECT_TIMEOUT, FAST_MALLOC, MAX_LOCAL_WORKERS, RETRIES, HeadTask,
                                        check_workers_see_run, dask_client, head_task_key, import_distributed,
                                        malloc_trim_threshold, parse_cluster, prepare_workers, run_fingerprint,
                                        submit_heads)
from qkviz.cluster.head_runner import HeadRunner
from qkviz.cluster.job_count import (MAX_JOBS, POOL_START_SECONDS, check_jobs, default_jobs, resolve_jobs,
                                     usable_cores)
from qkviz.cluster.local_pool import check_spawn_safe, end_with_parent, local_pool, start_quiet_worker

if TYPE_CHECKING:     # for annotations only: callers name the client's type without importing distributed
    from distributed import Client as DaskClient  # noqa: F401

__all__ = ["BackgroundCall", "CONNECT_TIMEOUT", "FAST_MALLOC", "MAX_JOBS", "MAX_LOCAL_WORKERS", "POOL_START_SECONDS",
           "RETRIES", "HeadRunner", "HeadTask", "check_jobs", "check_spawn_safe", "check_workers_see_run",
           "dask_client", "default_jobs", "end_with_parent", "head_task_key", "import_distributed", "local_pool",
           "malloc_trim_threshold", "parse_cluster", "prepare_workers", "resolve_jobs", "run_fingerprint",
           "start_quiet_worker", "submit_heads", "usable_cores"]
