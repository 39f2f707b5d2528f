"""``qkviz.project``: every chosen head's layouts, computed where not cached yet, with a progress bar."""

from __future__ import annotations

import logging
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm.auto import tqdm

from qkviz.cluster import check_jobs, resolve_jobs
from qkviz.core.alignment import Alignment
from qkviz.projection.catalogue import dim_list, method_list, projection_method
from qkviz.projection.defaults import DEFAULT_METHODS
from qkviz.projection.tasks import plan_specs, projection_runner, run_tasks
from qkviz.store.run import StoredRun, as_run

if TYPE_CHECKING:
    from qkviz.cluster import DaskClient

logger = logging.getLogger(__name__)
#: seconds between two log lines of the heads done and the time left
LOG_EVERY = 60.0
#: a layout by a method that is not instant, in serial seconds a token of its head: a rough figure for the default
#: number of jobs only (attn-tsne took about 3.4 s a MiniLM head at 5,950 tokens, 2 s a 1,024-head model's head at
#: 9,123 tokens)
SECONDS_PER_TOKEN = 2e-4


@dataclass
class ProjectionSummary:
    """What :func:`project` did: layouts computed, found cached and failed, and parameters it had to reduce.

    ``adjusted`` holds one ``(layer, head, method, parameter, asked, used)`` per reduced parameter
    (a perplexity or neighbour count too large for the head's number of points); ``failed`` one
    ``(layer, head, method, dim, error)`` per layout that could not be computed (the others went on)."""

    computed: int = 0
    cached: int = 0
    adjusted: list[tuple[int, int, str, str, object, object]] = field(default_factory=list)
    failed: list[tuple[int, int, str, int, str]] = field(default_factory=list)


def project(run: StoredRun | str | Path, methods: Sequence[str] | str = DEFAULT_METHODS,
            dims: Sequence[int] | int | None = None,
            *, layers: Sequence[int] | None = None, heads: Sequence[int] | None = None, jobs: int | None = None,
            seed: int = 0,
            translate_keys: bool = True, scale_norms: bool = True, params: dict[str, dict] | None = None,
            progress: bool = True, client: "DaskClient | None" = None) -> ProjectionSummary:
    """Project each chosen head's aligned query/key cloud with every method in every dimension, and cache it.

    Layouts already in the run's cache are not computed again, so an interrupted call resumes.

    Parameters
    ----------
    run
        A run, or the path of one.
    methods
        Projection methods, by name: a list, one name, or names separated by commas (``"pca,tsne"``) (``qkviz
        models`` and :func:`qkviz.projection.method_names` list them; default
        :data:`qkviz.projection.DEFAULT_METHODS`).
    dims
        Dimensions, 2, 3 or both (``3`` or ``[2, 3]``), made for every method; default each method's
        ``default_dims`` (2D and 3D, but 2D only for the t-SNE methods, whose 3D about doubles their time).
    layers, heads
        The heads to project (default: every layer and every head).
    jobs
        Worker processes; heads run in parallel. Default: the cores this process may use, or this process alone where
        the layouts are too few or too small to be worth starting workers (:func:`qkviz.cluster.default_jobs`); ``1``
        runs every head here. PCA alone always runs in this process. The layouts are the same whichever ran them.
    seed
        Seed of every stochastic step.
    translate_keys, scale_norms
        The alignment of keys with queries (see :class:`qkviz.core.Alignment`).
    params
        Per-method parameters overriding the defaults, ``{method: {parameter: value}}`` (each method's
        parameters: :func:`qkviz.projection.projection_method`; ``qkviz project --help``).
    progress
        Show a progress bar.
    client
        A Dask ``distributed.Client``: the heads run on its cluster's workers instead of local processes (see
        :mod:`qkviz.cluster`; leave ``jobs`` out). Every worker must see the run at the same
        path; this is checked first.

    Returns
    -------
    ProjectionSummary
        How many layouts were computed, how many were already cached, and which failed (each failure is
        also recorded in the run, for ``qkviz status`` and the app, until the layout is made).
    """
    methods, dims = method_list(methods), dim_list(dims)
    run = as_run(run)
    check_jobs(jobs, client)
    run.check_files()
    layers = range(run.n_layers) if layers is None else layers
    heads = range(run.n_heads) if heads is None else heads
    alignment = Alignment(translate_keys=translate_keys, scale_norms=scale_norms)
    specs = []
    for method in methods:
        method_dims = projection_method(method).default_dims if dims is None else dims
        specs += plan_specs(run, [method], method_dims, layers, heads, alignment, seed, params)
    # an instant method takes milliseconds per head: worker processes would cost more than they save
    instant = all(projection_method(method).instant for method in methods)
    jobs = 1 if instant else resolve_jobs(jobs, client, estimated_seconds(specs, run.n_tokens))
    runner = projection_runner(run, jobs, client, methods=tuple(methods))
    summary = ProjectionSummary()
    with runner, HeadProgress(specs, progress) as heads_done:
        for outcome in run_tasks(run, specs, runner):
            _count(summary, outcome, run)
            heads_done.count(outcome)
    logger.info("%s: %d layouts computed, %d already cached, %d failed", run.path, summary.computed, summary.cached,
                len(summary.failed))
    return summary


def estimated_seconds(specs, n_tokens: int) -> float:
    """Roughly how long ``specs``' layouts take in one process: :data:`SECONDS_PER_TOKEN` a token for each layout of a
    method that is not instant (those found cached included)."""
    return sum(0.0 if projection_method(spec.method).instant else SECONDS_PER_TOKEN * n_tokens for spec in specs)


class HeadProgress:
    """Heads finished out of the chosen ones, on a progress bar, and the time left estimated from the heads computed
    so far: their mean rate since the start (the workers' start-up included), heads found cached left out of it, as
    they cost nothing. Without a terminal the same figures are logged every :data:`LOG_EVERY` seconds."""

    def __init__(self, specs, progress: bool = True, clock=time.monotonic):
        self.clock = clock
        self.left = Counter((spec.layer, spec.head) for spec in specs)
        self.computed_heads: set[tuple[int, int]] = set()
        self.started = self.logged = clock()
        self.cached = self.computed = 0
        # smoothing 0: tqdm's rate is the mean over the heads computed (n - initial), not the last few
        self.bar = tqdm(total=len(self.left), unit="head", desc="projecting", disable=not progress,
                        dynamic_ncols=True, smoothing=0)
        self.log_lines = not progress or not sys.stderr.isatty()   # the bar shows them on a terminal

    def __enter__(self) -> "HeadProgress":
        return self

    def __exit__(self, error_type, *exc_info) -> None:
        self.bar.close()
        if self.computed and error_type is None:      # interrupted: the caller says so
            logger.info("%d heads computed in %s (%.2f s a head), %d found cached", self.computed,
                        _duration(self.clock() - self.started), self.seconds_per_head(), self.cached)

    def count(self, outcome: dict) -> None:
        """One layout's outcome (:func:`~qkviz.projection.tasks.run_tasks`); a head is done with its last layout."""
        head = (outcome["spec"].layer, outcome["spec"].head)
        if not outcome["cached"]:
            self.computed_heads.add(head)
        self.left[head] -= 1
        if self.left[head]:
            return
        if head in self.computed_heads:
            self.computed += 1
        else:                       # found cached: done, but not part of the rate
            self.cached += 1
            if not self.bar.disable:
                self.bar.initial += 1
        self.bar.update()
        now = self.clock()
        if self.log_lines and self.computed and now - self.logged >= LOG_EVERY:
            self.logged = now
            logger.info("%d of %d heads done in %s; about %s left", self.computed + self.cached, len(self.left),
                        _duration(now - self.started), _duration(self.remaining()))

    def seconds_per_head(self) -> float:
        """Wall seconds per computed head so far (all workers together)."""
        return (self.clock() - self.started) / max(self.computed, 1)

    def remaining(self) -> float:
        """Estimated wall seconds until every head is done."""
        return self.seconds_per_head() * (len(self.left) - self.computed - self.cached)


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min" if hours else f"{minutes} min {seconds:02d} s" if minutes else f"{seconds} s"


def _count(summary: ProjectionSummary, outcome: dict, run: StoredRun) -> None:
    spec = outcome["spec"]
    if "error" in outcome:
        summary.failed.append((spec.layer, spec.head, spec.method, spec.dim, outcome["error"]))
        return
    if outcome["cached"]:
        summary.cached += 1
        return
    summary.computed += 1
    for name, (asked, used) in outcome.get("adjusted", {}).items():
        summary.adjusted.append((spec.layer, spec.head, spec.method, name, asked, used))
        logger.warning("layer %d head %d %s: %s %s is too large for %d points; used %s",
                       spec.layer, spec.head, spec.method, name, asked, 2 * run.n_tokens, used)
