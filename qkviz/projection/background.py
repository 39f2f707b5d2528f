"""Layouts made in the background while something else (the app) goes on: :class:`LayoutWorker`.

``qkviz serve`` on a run without its default layouts starts at once with PCA and hands the missing
layouts of one method to a worker: a thread that feeds the per-head tasks of :mod:`qkviz.projection.tasks`
to a pool of worker processes at a lower priority (:func:`~qkviz.projection.tasks.projection_runner`, so the
serving process keeps its CPU and its interpreter lock), and
records what has landed. Each layout is written to the run's cache the moment it is made, exactly as
``qkviz project`` writes it (and under the same per-head locks, so a ``qkviz project`` on the same
run at the same time shares the work instead of repeating it); a layout that fails is recorded in the
run and the others go on.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from qkviz.cluster import MAX_JOBS
from qkviz.projection.tasks import plan_specs, projection_runner, run_tasks
from qkviz.store.projections import ProjectionCache, ProjectionSpec
from qkviz.store.run import StoredRun

logger = logging.getLogger(__name__)

#: how much lower the background processes' priority is than the app's (which answers the browser meanwhile)
BACKGROUND_NICENESS = 10
#: the server logs its estimate of the time left once this many layouts (or a tenth of them) have landed
ESTIMATE_AFTER = 3


@dataclass(frozen=True)
class LayoutProgress:
    """A snapshot of a :class:`LayoutWorker`: ``total`` layouts it was given (those not cached when it
    started), ``done`` of them made, ``failed`` ``{(layer, head): error}``, and the estimated seconds
    until the rest are made, at the pace since the first one landed (None until two have, or when
    finished)."""

    method: str
    dim: int
    total: int
    done: int
    failed: dict[tuple[int, int], str]
    running: bool
    elapsed_seconds: float
    remaining_seconds: float | None

    @property
    def finished(self) -> bool:
        return not self.running and self.done + len(self.failed) >= self.total


class LayoutWorker:
    """Makes the missing ``method`` ``dim``-D layouts of every head of ``run`` (the default parameters, as
    the app reads them), in ``jobs`` worker processes, in layer / head order.

    :meth:`run_all` blocks (``qkviz serve`` runs it in a daemon thread); :meth:`progress` and :meth:`pending` may be
    called from any thread meanwhile."""

    def __init__(self, run: StoredRun, method: str, dim: int = 2, jobs: int = 1, seed: int = 0):
        # at most one process per CPU, as --jobs everywhere (more processes than cores are slower, not faster)
        self.run, self.method, self.dim, self.jobs = run, method, dim, min(max(1, jobs), MAX_JOBS)
        specs = plan_specs(run, [method], [dim], range(run.n_layers), range(run.n_heads), seed=seed)
        self._cache = cache = ProjectionCache(run.path, run.manifest["fingerprint"])
        self._todo: list[ProjectionSpec] = [spec for spec in specs if not cache.contains(spec)]
        self._absorbed_at = -float("inf")
        self._estimated = False
        self._waiting = {(spec.layer, spec.head) for spec in self._todo}
        self._failed: dict[tuple[int, int], str] = {}
        self._landed_at: list[float] = []
        self._lock = threading.Lock()
        self._started: float | None = None
        self._finished: float | None = None

    def run_all(self) -> None:
        """Make every layout (blocking); what fails is recorded, and the rest go on."""
        self._started = time.monotonic()
        if not self._todo:
            self._finished = self._started
            return
        logger.info("%s: making the %s %dD layouts of %d heads in the background (%d worker process%s)",
                    self.run.path, self.method, self.dim, len(self._todo), self.jobs, "" if self.jobs == 1 else "es")
        runner = projection_runner(self.run, self.jobs, methods=(self.method,),
                                   niceness=BACKGROUND_NICENESS, always_pool=True)
        try:
            for outcome in run_tasks(self.run, self._todo, runner):
                self._land(outcome)
        except Exception as error:  # noqa: BLE001 -- the pool broke (a worker killed): shown on every head left
            logger.exception("%s: background layouts stopped", self.run.path)
            with self._lock:
                for head in self._waiting:
                    self._failed.setdefault(head, f"the background worker stopped: {type(error).__name__}: {error}")
                self._waiting.clear()
        finally:
            runner.close()
            self._finished = time.monotonic()
            progress = self.progress()
            logger.info("%s: %s layouts made for %d of %d heads in %.0f s (%d failed)", self.run.path, self.method,
                        progress.done, progress.total, progress.elapsed_seconds, len(progress.failed))

    def _land(self, outcome: dict) -> None:
        spec = outcome["spec"]
        head = (spec.layer, spec.head)
        with self._lock:
            if head in self._waiting and "error" in outcome:
                self._failed[head] = outcome["error"]
            elif head in self._waiting:
                self._landed_at.append(time.monotonic())
            self._waiting.discard(head)
        self._absorb_made_elsewhere()
        if not self._estimated and len(self._landed_at) >= max(ESTIMATE_AFTER, len(self._todo) // 10):
            self._estimated = True
            remaining = self.progress().remaining_seconds
            if remaining is not None:
                logger.info("%s: the other %d %s layouts will take about %s at this pace", self.run.path,
                            len(self._waiting), self.method, describe_seconds(remaining))

    def _absorb_made_elsewhere(self, every: float = 1.0) -> None:
        """Count as landed the waiting heads whose layout is in the cache already: another process (a
        ``qkviz project`` on the same run) made it; checked at most every ``every`` seconds."""
        now = time.monotonic()
        if now - self._absorbed_at < every:
            return
        self._absorbed_at = now
        with self._lock:
            waiting = [spec for spec in self._todo if (spec.layer, spec.head) in self._waiting]
        made = [spec for spec in waiting if self._cache.exists(spec)]
        with self._lock:
            for spec in made:
                if (spec.layer, spec.head) in self._waiting:
                    self._waiting.discard((spec.layer, spec.head))
                    self._landed_at.append(now)

    def pending(self, layer: int, head: int) -> bool:
        """Whether this head's layout is still to come (not made, not failed)."""
        with self._lock:
            return (layer, head) in self._waiting

    def failure(self, layer: int, head: int) -> str | None:
        with self._lock:
            return self._failed.get((layer, head))

    def progress(self) -> LayoutProgress:
        if self._finished is None and self._started is not None:
            self._absorb_made_elsewhere()
        now = time.monotonic()
        with self._lock:
            done, failed, waiting = len(self._landed_at), dict(self._failed), len(self._waiting)
            landed = list(self._landed_at)
        # running until nothing is waiting: the pool's shutdown after the last layout lands is not "being made"
        running = self._finished is None and waiting > 0
        remaining = None
        if running and waiting and len(landed) >= 2:
            # the pace since the first layout landed (worker start-up left out; heads another process made
            # count as they land, see _absorb_made_elsewhere)
            remaining = (landed[-1] - landed[0]) / (len(landed) - 1) * waiting
        end = self._finished or (now if running or not landed else landed[-1])
        elapsed = end - self._started if self._started is not None else 0.0
        return LayoutProgress(self.method, self.dim, len(self._todo), done, failed, running, elapsed, remaining)


def describe_seconds(seconds: float) -> str:
    """``"40 s"``, ``"3 min"``, ``"1 h 5 min"``."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60} min"
