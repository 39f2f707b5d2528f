"""``qkviz.build_indexes``: the token index and, past the exact limit, every chosen head's partner indexes."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tqdm.auto import tqdm

from qkviz.cluster import HeadRunner, HeadTask
from qkviz.core.errors import QkvizError
from qkviz.search.mips_index import EXACT_LIMIT, IndexInfo
from qkviz.search.partner_index import IndexTarget, PartnerIndexes, index_targets
from qkviz.search.token_index import TokenIndex, store_token_index
from qkviz.store.run import StoredRun, as_run, open_stored_run

if TYPE_CHECKING:
    from qkviz.cluster import DaskClient

logger = logging.getLogger(__name__)


@dataclass
class IndexSummary:
    """What :func:`build_indexes` wrote: ``recalls`` holds the measured recall@10 of each approximate index."""

    directory: Path
    n_indexes: int
    n_bytes: int
    seconds: float
    recalls: list[float] = field(default_factory=list)


def build_indexes(run: StoredRun | str | Path, *, layers: Sequence[int] | None = None,
                  heads: Sequence[int] | None = None, exact_limit: int = EXACT_LIMIT, seed: int = 0,
                  progress: bool = True, client: "DaskClient | None" = None) -> IndexSummary:
    """Build the indexes the corpus-wide searches answer from, into ``<run>/indexes/``.

    The token index of the global search and, for every chosen head, what its partner searches need:
    up to ``exact_limit`` tokens nothing (exact search reads the run's own arrays; older index files
    of those heads are deleted), past it an inverted file with measured recall@10 over its keys (which
    keys a query seeks) and over its queries (which queries seek a key), holding row numbers, not vectors.

    Parameters
    ----------
    run
        A run, or the path of one.
    layers, heads
        The heads to index (default: all).
    exact_limit
        Exact search (no index) up to this many tokens, approximate indexes past it.
    seed
        Seed of the approximate indexes' k-means.
    progress
        Show a progress bar.
    client
        A Dask ``distributed.Client``: past ``exact_limit`` each index is built, and written, by one of its
        cluster's workers (see :mod:`qkviz.cluster`). Every worker must see the run at the same path; this is
        checked first.
    """
    run = as_run(run)
    if exact_limit < 1:
        raise QkvizError(f"exact_limit must be at least 1, got {exact_limit}")
    layers = range(run.n_layers) if layers is None else layers
    heads = range(run.n_heads) if heads is None else heads
    for layer in layers:
        for head in heads:
            run.check_head(layer, head)
    targets = index_targets(run, list(layers), list(heads))
    # up to the limit there is nothing to build: no cluster needed; past it, its workers checked before any work
    runner = HeadRunner(run, "index", client=client if run.n_tokens > exact_limit else None)
    started = time.perf_counter()
    token_index_path = store_token_index(run, TokenIndex.build(run.tokens.token))
    summary = IndexSummary(token_index_path.parent, len(targets), 0, 0.0)
    path = str(Path(run.path).absolute())     # a worker's working directory is not ours
    tasks = [HeadTask(target.layer, target.head, (path, target, exact_limit, seed)) for target in targets]
    with runner, tqdm(total=len(targets), unit="index", desc="indexing", disable=not progress,
                      dynamic_ncols=True) as bar:
        for _, (info, size) in runner.run(build_partner_index, tasks):
            summary.n_bytes += size
            if not info.exact:
                summary.recalls.append(info.recall_at_10)
            bar.update()
    summary.seconds = time.perf_counter() - started
    if summary.recalls:
        described = (f"token index and {summary.n_indexes} approximate partner indexes, recall@10 "
                     f"{min(summary.recalls):.3f} to {max(summary.recalls):.3f}")
    else:
        described = (f"token index; the {summary.n_indexes} partner searches are exact on the run's arrays, nothing stored "
                     f"for them ({run.n_tokens:,} tokens <= exact limit {exact_limit:,})")
    logger.info("%s: %s, %.1f MB, in %.1f s", summary.directory, described, summary.n_bytes / 1e6, summary.seconds)
    return summary


def build_partner_index(run_path: str, target: IndexTarget, exact_limit: int, seed: int) -> tuple[IndexInfo, int]:
    """One index (a pure task, run here or by a Dask worker): :meth:`PartnerIndexes.build` of ``target`` in the
    run at ``run_path``; ``(info, bytes on disk)``. The inverted file is written through a temporary file and a
    rename, then its sidecar, so a worker killed meanwhile leaves no index that reads as complete."""
    return PartnerIndexes(open_stored_run(run_path), exact_limit=exact_limit).build(target, seed=seed)
