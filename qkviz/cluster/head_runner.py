"""The one executor of per-head tasks, :class:`HeadRunner`: in this process, on a persistent pool of local worker
processes, or on a Dask cluster. The projection (:func:`qkviz.project` and the app's background layouts), the
head atlas and the search indexes all run their tasks through it."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

from qkviz.cluster.dask_cluster import HeadTask, prepare_workers, submit_heads
from qkviz.cluster.job_count import check_jobs
from qkviz.cluster.local_pool import check_spawn_safe, local_pool, start_quiet_worker
from qkviz.core.errors import QkvizError
from qkviz.core.option_names import option
from qkviz.store.run import StoredRun

if TYPE_CHECKING:
    from distributed import Client

class HeadRunner:
    """Runs one pure task per head: in this process (``jobs`` 1, no ``client``), on a pool of ``jobs`` local
    worker processes, or on the workers of a Dask ``client``; :meth:`run` yields each result as it finishes.

    Made before the work: it refuses bad ``jobs`` and checks that every worker of ``client`` sees ``run`` (one
    :class:`QkvizError` line otherwise; then it logs ``<doing> on N Dask workers`` and the dashboard's address).
    The pool is persistent: spawned with the first tasks, each worker started once by ``initializer(*initargs)``
    (a projection's also compiles UMAP's numba code; the app's background lowers its priority), kept for every
    later :meth:`run`, and shut down by :meth:`close` or on leaving a ``with`` block. With ``always_pool`` even one
    job runs in a worker process, so that the caller (the app's server) keeps its CPU and its interpreter lock.
    A task run here runs on one BLAS thread, as in a worker (:func:`one_thread`): results do not depend on ``jobs``.
    A Dask task that ends every worker it is given is one line ending with what to do ``instead``."""

    def __init__(self, run: StoredRun, what: str, jobs: int = 1, client: "Client | None" = None, *,
                 initializer: Callable = start_quiet_worker, initargs: tuple = (), always_pool: bool = False,
                 doing: str | None = None, instead: str | None = None):
        check_jobs(jobs, client)
        self.what, self.jobs, self.client = what, jobs, client
        self.instead = instead or f"run it here ({option('client', None, flag='--dask')} left out)"
        self._start = (initializer, initargs)
        self._on_pool = client is None and (jobs > 1 or always_pool)
        self._pool: ProcessPoolExecutor | None = None
        if self._on_pool and jobs > 1:    # before any work: a script without a __main__ guard cannot start workers
            check_spawn_safe()
        if client is not None:
            prepare_workers(client, run, doing or what)

    def __enter__(self) -> "HeadRunner":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        """Shut the pool down, if one was started, without waiting: the tasks not started are cancelled."""
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def run(self, function: Callable, tasks: Sequence[HeadTask], shared: object = None) -> Iterator[tuple[int, Any]]:
        """Run ``function(*task.args, shared)`` (``function(*task.args)`` without ``shared``) for every task
        and yield ``(its number in tasks, its result)`` as each finishes (on Dask: keys ``<what>-L3H4-...``,
        ``shared`` sent to each worker once, not with every task). Leaving early cancels what has not started."""
        if self.client is not None:
            if shared is not None:
                tasks = _with_shared(tasks, self.client.scatter(shared, broadcast=True))
            yield from submit_heads(self.client, self.what, function, tasks, instead=self.instead)
            return
        tasks = tasks if shared is None else _with_shared(tasks, shared)
        if self._on_pool:
            yield from self._run_on_pool(function, tasks)
        else:
            for number, task in enumerate(tasks):
                yield number, one_thread(function, task.args)

    def _run_on_pool(self, function: Callable, tasks: Sequence[HeadTask]) -> Iterator[tuple[int, Any]]:
        if not tasks:
            return
        if self._pool is None:
            initializer, initargs = self._start
            self._pool = local_pool(self.jobs, initializer, initargs)
        futures = {self._pool.submit(function, *task.args): number for number, task in enumerate(tasks)}
        try:
            for future in as_completed(futures):
                try:
                    yield futures[future], future.result()
                except BrokenProcessPool:
                    task = tasks[futures[future]]
                    raise QkvizError(f"a worker process ended while running layer {task.layer} head {task.head}'s "
                                     f"{self.what} task (out of memory?): run with fewer {option('jobs', None)}") \
                        from None
        finally:
            for future in futures:
                future.cancel()


def one_thread(function: Callable, args: tuple) -> Any:
    """``function(*args)`` here on one BLAS and OpenMP thread, as a pool worker runs it, so that a task's result does
    not depend on where it ran (with torch loaded, a layout made on this process's two threads differed from a
    worker's in every coordinate); the threads this process had are restored after it."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(1):
        return function(*args)


def _with_shared(tasks: Sequence[HeadTask], shared: object) -> list[HeadTask]:
    return [HeadTask(task.layer, task.head, (*task.args, shared)) for task in tasks]
