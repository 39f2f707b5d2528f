"""One pure task per head, run here, on a local pool of worker processes, or on a Dask cluster."""

from __future__ import annotations

import os
from concurrent.futures import as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from qkviz.cluster.dask_cluster import HeadTask, prepare_workers, submit_heads
from qkviz.cluster.local_pool import local_pool
from qkviz.core.errors import QkvizError
from qkviz.store.run import StoredRun

if TYPE_CHECKING:
    from distributed import Client

#: the most worker processes of a local pool: one per CPU
MAX_JOBS = os.cpu_count() or 1


def check_jobs(jobs: int, client: "Client | None") -> None:
    """One :class:`QkvizError` line for a number of local worker processes out of range, or given with a client."""
    if client is not None and jobs != 1:
        raise QkvizError(f"jobs={jobs} is for local worker processes: with a Dask client the cluster's workers run the "
                         "heads; leave jobs at 1")
    if not 1 <= jobs <= MAX_JOBS:
        raise QkvizError(f"jobs must be between 1 and {MAX_JOBS} (this machine's {os.cpu_count()} CPUs): more "
                         f"processes than cores are slower, not faster; got {jobs}")


class HeadRunner:
    """Runs one pure task per head: in this process (``jobs`` 1, no ``client``), on a pool of ``jobs`` local
    worker processes, or on the workers of a Dask ``client``. Made before the work: it refuses bad ``jobs``
    and checks that every worker of ``client`` sees ``run`` (one :class:`QkvizError` line otherwise)."""

    def __init__(self, run: StoredRun, what: str, jobs: int = 1, client: "Client | None" = None):
        check_jobs(jobs, client)
        self.what, self.jobs, self.client = what, jobs, client
        if client is not None:
            prepare_workers(client, run, what)

    def run(self, function: Callable, tasks: Sequence[HeadTask], shared: object = None) -> Iterator[tuple[int, Any]]:
        """Run ``function(*task.args, shared)`` (``function(*task.args)`` without ``shared``) for every task
        and yield ``(its number in tasks, its result)`` as each finishes (on Dask: keys ``<what>-L3H4-...``,
        ``shared`` sent to each worker once, not with every task). Leaving early cancels what has not started."""
        if self.client is not None:
            if shared is not None:
                tasks = _with_shared(tasks, self.client.scatter(shared, broadcast=True))
            yield from submit_heads(self.client, self.what, function, tasks, instead="run it without --dask")
            return
        tasks = tasks if shared is None else _with_shared(tasks, shared)
        if self.jobs == 1:
            for number, task in enumerate(tasks):
                yield number, function(*task.args)
        else:
            yield from _pool_heads(function, tasks, self.jobs, self.what)


def _with_shared(tasks: Sequence[HeadTask], shared: object) -> list[HeadTask]:
    return [HeadTask(task.layer, task.head, (*task.args, shared)) for task in tasks]


def _pool_heads(function: Callable, tasks: Sequence[HeadTask], jobs: int, what: str) -> Iterator[tuple[int, Any]]:
    pool = local_pool(jobs)
    futures = {pool.submit(function, *task.args): number for number, task in enumerate(tasks)}
    try:
        for future in as_completed(futures):
            try:
                yield futures[future], future.result()
            except BrokenProcessPool:
                task = tasks[futures[future]]
                raise QkvizError(f"a worker process ended while running layer {task.layer} head {task.head}'s {what} "
                                 "task (out of memory?): run with fewer --jobs") from None
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
