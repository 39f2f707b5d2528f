"""The head atlas of a run: every head's statistics, label, relative-position profile and exemplars.

Stored in ``<run>/stats/``: ``head_stats.parquet`` (one row per layer and head: the
:data:`qkviz.analysis.statistics.head_stats.STATISTICS`, with ``--syntax`` also :data:`qkviz.analysis.statistics.syntax.SYNTAX_STATISTICS`,
``label``, ``label_detail``), ``relative_position.npy``
(float64 ``[layer, head, 2 * max_offset + 1]``, offset ``-max_offset`` first),
``exemplars.parquet`` (``layer, head, rank, sentence, query, key, weight, query_token,
key_token, text``), ``term_profiles.npy`` (``[layer, head, term, offset]``: the attention of each
logit term alone by relative position; the terms' variance shares are ``share_<term>`` columns),
and for runs extracted with ``--head-update`` ``update_histograms.npy`` (``[layer, head, 2, bins]``:
shares of tokens by log10 update ratio and by cosine; ``UPDATE_STATISTICS`` columns), and for
absolute-position models ``embedding_profiles.npy`` (the first layer's token / position split,
``[head, term, offset]``; ``embed_share_<term>`` columns), ``offset_support.npy`` (float64
``[layer, head, 3, 2 * max_offset + 1]``, :data:`qkviz.analysis.statistics.head_stats.OFFSET_SUPPORT_ROWS`: per offset
its queries, those whose key there is not the first token and their mean attention there, what a positional label
rests on), ``labels.parquet`` and ``probes.parquet``, and ``atlas.json``, written last: the run's fingerprint, the
thresholds and the offset range. Without a matching ``atlas.json`` there is no atlas; an atlas of an older schema is
refused with one line naming ``qkviz stats`` to compute it again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np
import pandas as pd

from qkviz.analysis.atlas.atlas_tasks import (EXEMPLAR_COLUMNS, UPDATE_BINS, UPDATE_RATIO_RANGE, UPDATE_STATISTICS,
                                        AtlasSettings, HeadEntry, forget_run_states, head_entry, head_update_summary)
from qkviz.analysis.labels.registry import LabelThresholds
from qkviz.analysis.statistics.head_stats import (DEFAULT_MAX_OFFSET, IMAGE_STATISTICS, OFFSET_SUPPORT_ROWS, STATISTICS,
                                                  TokenKinds)
from qkviz.analysis.statistics.value_shares import VALUE_STATISTICS
from qkviz.analysis.statistics.induction_scores import REPEAT_STATISTICS
from qkviz.analysis.labels.label_table import LABEL_COLUMNS, as_label_table, corpus_labels, probe_labels, strongest_labels
from qkviz.analysis.statistics.uniform_chance import uniform_chance
from qkviz.analysis.labels.writing_rule import writing_labels
from qkviz.analysis.logits.logit_decomposition import EMBEDDING_TERMS, TERMS, EmbeddingSplit, available_terms
from qkviz.analysis.statistics.syntax import SYNTAX_STATISTICS, TokenSyntax
from qkviz.cluster import HeadRunner, HeadTask, resolve_jobs
from qkviz.core.errors import QkvizError
from qkviz.core.option_names import option
from qkviz.store import files as run_files
from qkviz.store.artifacts import ArtifactDirectory
from qkviz.store.run import StoredRun, as_run

if TYPE_CHECKING:
    from qkviz.cluster import DaskClient

logger = logging.getLogger(__name__)

__all__ = ["ATLAS_SCHEMA_VERSION", "EXEMPLAR_COLUMNS", "UPDATE_BINS", "UPDATE_RATIO_RANGE", "UPDATE_STATISTICS",
           "HeadAtlas", "compute_atlas", "compute_corpus_stats", "head_update_summary", "load_atlas", "store_atlas"]

#: what ``qkviz.compute_stats`` hands the atlas while its probes still run: a call giving ``(probes, probe_note,
#: writes_note)``
PendingProbes = Callable[[], tuple[pd.DataFrame | None, str, str]]

#: a head's statistics in serial seconds, per token and per attending query-key pair: rough figures for the default
#: number of jobs only (MiniLM's heads over 5,000 tokens of short sentences took about 0.1 s each, the 1,024-head
#: model's over 9,123 tokens in 3,000-token documents about 1 s, on the idle 2-core machine)
SECONDS_PER_TOKEN, SECONDS_PER_PAIR = 2e-5, 7e-8

#: 2: logit terms, term and embedding profiles, head-update histograms; 3: label table, probes; 4: offset support,
#: relation baselines, the label table's queries
ATLAS_SCHEMA_VERSION = 4


@dataclass
class HeadAtlas:
    table: pd.DataFrame          # one row per (layer, head)
    relative_position: np.ndarray  # [layer, head, 2 * max_offset + 1]
    exemplars: pd.DataFrame
    max_offset: int
    thresholds: LabelThresholds
    terms: tuple[str, ...] = TERMS[:1]   # logit terms (qkviz.analysis.logits.logit_decomposition, the content term
    #                                      alone by default); shares are share_<term> columns
    term_profiles: np.ndarray | None = None  # [layer, head, term, 2 * max_offset + 1]
    update_histograms: np.ndarray | None = None  # [layer, head, 2, UPDATE_BINS] with --head-update runs
    #: absolute-position models: [head, EMBEDDING_TERMS, 2 * max_offset + 1] of the first layer
    #: (shares: embed_share_<term> columns, NaN past layer 0)
    embedding_profiles: np.ndarray | None = None
    #: every label each head earns, with its evidence (qkviz.analysis.labels.label_table.LABEL_COLUMNS); the table's
    #: ``label`` column is each head's strongest
    labels: pd.DataFrame = None
    #: every head's score on the repeated-random-tokens probe (qkviz.probes.head_probes.PROBE_COLUMNS), or None
    probes: pd.DataFrame | None = None
    #: what the probes were run on, or why they were not
    probe_note: str = ""
    #: [layer, head, OFFSET_SUPPORT_ROWS, 2 * max_offset + 1]: what a positional label rests on (head_stats)
    offset_support: np.ndarray | None = None
    #: what the copying probe (the copying and suppression labels, qkviz.probes.writing_probe) ran on, or why it did not
    writes_note: str = ""

    def __post_init__(self):
        if self.labels is None:
            self.labels = pd.DataFrame(columns=list(LABEL_COLUMNS))

    def labels_of(self, layer: int, head: int) -> pd.DataFrame:
        """The labels head ``(layer, head)`` earns, strongest first (score over threshold)."""
        rows = self.labels[(self.labels.layer == layer) & (self.labels["head"] == head)]
        return rows.iloc[np.argsort(-(rows.score / rows.threshold).to_numpy(float), kind="stable")]

    @property
    def offsets(self) -> np.ndarray:
        return np.arange(-self.max_offset, self.max_offset + 1)


def compute_corpus_stats(run: StoredRun | str | Path, *, max_offset: int = DEFAULT_MAX_OFFSET, argmax_share: float = 0.5,
                         broad_entropy: float = 0.8, exemplars: int = 5, syntax: bool = False,
                         progress: bool = True, jobs: int | None = None, client: "DaskClient | None" = None,
                         probes: pd.DataFrame | None = None, probe_note: str = "",
                         thresholds: LabelThresholds | None = None, writes_note: str = "",
                         pending_probes: PendingProbes | None = None) -> HeadAtlas:
    """Compute the head atlas of a run and store it in ``<run>/stats/`` (what ``qkviz stats`` does).

    Every head's attention is recomputed over the whole corpus from the stored vectors.

    Parameters
    ----------
    run
        A run, or the path of one.
    max_offset
        Relative positions kept in the profiles: ``-max_offset .. max_offset``.
    argmax_share
        Label threshold: share of queries whose strongest key is of the same kind.
    broad_entropy
        Label threshold: normalised entropy above which a head is labelled broad.
    thresholds
        The other label thresholds (:class:`qkviz.analysis.LabelThresholds`: ``position_mass``, ``local_mass``,
        ``first_token``, ``copying``, ``relation``, ``over_chance``, ``min_queries``, ``offset_support``, ...);
        ``argmax_share`` and ``broad_entropy`` above replace theirs.
    exemplars
        Exemplar sentences kept per head.
    syntax
        Also attention to each part of speech and dependency alignment (needs the ``syntax`` extra; image runs
        have none: left out with a warning).
    progress
        Show progress bars.
    jobs
        Local worker processes; heads run in parallel (at most one per core). Default: the cores this process may
        use, or this process alone where the work is too small to be worth starting workers
        (:func:`qkviz.cluster.default_jobs`); ``1`` runs every head here. The atlas is the same whichever ran it.
    client
        A Dask ``distributed.Client``: the heads run on its cluster's workers instead (see :mod:`qkviz.cluster`;
        leave ``jobs`` out). Every worker must see the run at the same path; this is checked first. The atlas
        is written here, once, as without a cluster.
    probes
        Every head's repeated-random-tokens probe scores (:func:`qkviz.probes.probe_heads`, which needs the model),
        for the induction and duplicate-token labels; ``qkviz.compute_stats`` runs them where the model is at hand.
    probe_note
        What the probes ran on, or why there are none (kept in the atlas).
    writes_note
        What the copying probe ran on, or why it did not (``"not computed: no unembedding ..."``), kept in the atlas.
    pending_probes
        Instead of ``probes``, ``probe_note`` and ``writes_note``: a call that returns the three once the heads'
        statistics are in, made then (``qkviz.compute_stats`` runs the model's probes meanwhile, on a thread).

    Returns
    -------
    HeadAtlas
        The atlas, as :meth:`qkviz.Run.atlas` reads it back.
    """
    run = as_run(run)
    if syntax and run.is_image_run:
        logger.warning("%s is an image run: part of speech and dependencies do not apply to image patches, so "
                       "%s is left out; the other statistics are computed (on the patch grid)", run.path, option("syntax"))
        syntax = False
    if max_offset < 1 or exemplars < 0:
        raise QkvizError(f"max_offset must be at least 1 and exemplars at least 0, got {max_offset} and {exemplars}")
    thresholds = replace(thresholds or LabelThresholds(), argmax_share=argmax_share, broad_entropy=broad_entropy)
    for name, value in thresholds.as_dict().items():
        if not (0 <= value if name in ("over_chance", "min_queries") else 0 < value <= 1):
            raise QkvizError(f"{name} must be in {'[0, inf)' if name in ('over_chance', 'min_queries') else '(0, 1]'}, "
                             f"got {value}")
    if pending_probes is None:
        pending_probes = lambda: (probes, probe_note, writes_note)   # noqa: E731
    atlas = compute_atlas(run, thresholds, max_offset, exemplars, syntax=syntax, progress=progress, jobs=jobs,
                          client=client, pending_probes=pending_probes)
    directory = store_atlas(run, atlas)
    counts = atlas.table.label.value_counts()
    earned = atlas.labels.drop_duplicates(["layer", "head", "label"]).label.value_counts()
    logger.info("%s: %d heads; strongest labels: %s; heads per label: %s", directory, len(atlas.table),
                ", ".join(f"{label} {count}" for label, count in counts.items()),
                ", ".join(f"{label} {count}" for label, count in earned.items()))
    return atlas


def compute_atlas(run: StoredRun, thresholds: LabelThresholds = LabelThresholds(), max_offset: int = DEFAULT_MAX_OFFSET,
                  n_exemplars: int = 5, syntax: bool = False, progress: bool = False, jobs: int | None = None,
                  client: "DaskClient | None" = None, probes: pd.DataFrame | None = None,
                  probe_note: str = "", pending_probes: PendingProbes | None = None) -> HeadAtlas:
    """Statistics of every head (attention recomputed from the stored vectors, batch by batch);
    with ``syntax``, also the part-of-speech and dependency statistics of :mod:`qkviz.analysis.statistics.syntax`.

    Each head is one :func:`~qkviz.analysis.atlas.atlas_tasks.head_entry` task, run in this process, on ``jobs``
    local worker processes (``None``: :func:`qkviz.cluster.resolve_jobs` of :func:`estimated_atlas_seconds`), or on
    the workers of a Dask ``client``; the atlas is assembled here in (layer, head) order, so it is the same whichever
    ran it. With ``syntax`` the corpus is parsed here, once. ``pending_probes`` (``(probes, probe_note, writes_note)``
    once called) is called when every head's entry is in, before the labels."""
    from tqdm.auto import tqdm

    jobs = resolve_jobs(jobs, client, estimated_atlas_seconds(run))
    logger.debug("%s: head statistics on %d local jobs", run.path, jobs)
    runner = HeadRunner(run, "stats", jobs, client)     # the cluster's workers checked before any work
    has_updates = run.has_part(run_files.HEAD_UPDATES)
    _warn_about_missing_parts(run, has_updates)
    token_syntax = TokenSyntax.parse(run) if syntax else None
    settings = AtlasSettings(max_offset, n_exemplars, thresholds)
    path = str(Path(run.path).absolute())    # a worker's working directory is not ours
    heads = [(layer, head) for layer in range(run.n_layers) for head in range(run.n_heads)]
    tasks = [HeadTask(layer, head, (path, layer, head, settings)) for layer, head in heads]
    entries: list[HeadEntry | None] = [None] * len(tasks)
    try:
        with runner, tqdm(total=len(tasks), unit="head", desc="head statistics", disable=not progress,
                          dynamic_ncols=True) as bar:
            for number, entry in runner.run(head_entry, tasks, shared=token_syntax):
                entries[number] = entry
                bar.update()
    finally:
        forget_run_states()
    writes_note = ""
    if pending_probes is not None:
        probes, probe_note, writes_note = pending_probes()
    atlas = _assemble(run, [entry for entry in entries if entry is not None], settings, syntax, has_updates)
    atlas.probes, atlas.probe_note, atlas.writes_note = probes, probe_note, writes_note
    if not run.is_image_run:
        _label(run, atlas, probes)
    return atlas


def estimated_atlas_seconds(run: StoredRun) -> float:
    """Roughly how long every head's statistics take in one process: :data:`SECONDS_PER_TOKEN` a token and
    :data:`SECONDS_PER_PAIR` a query-key pair within a sentence (a key at or before its query in a causal model)."""
    lengths = np.bincount(run.tokens.sentence.to_numpy()).astype(np.float64)
    pairs = float((lengths * (lengths + 1) / 2 if run.is_causal else lengths ** 2).sum())
    return run.n_layers * run.n_heads * (SECONDS_PER_TOKEN * run.n_tokens + SECONDS_PER_PAIR * pairs)


def _label(run: StoredRun, atlas: HeadAtlas, probes: pd.DataFrame | None) -> None:
    """Every label each head of a text run earns (:mod:`qkviz.analysis.labels.label_table`), and its strongest."""
    kinds = TokenKinds.of(run)
    later = run.tokens.position.to_numpy() > 0
    delimiter_share = float(kinds.delimiter[later].mean()) if later.any() else 0.0
    chances = {layer: uniform_chance(run, layer, atlas.max_offset) for layer in range(run.n_layers)}
    rows = []
    supports = atlas.offset_support.reshape(-1, len(OFFSET_SUPPORT_ROWS), atlas.offsets.size)
    for row, support in zip(atlas.table.to_dict("records"), supports):
        rows += corpus_labels(row, support, chances[int(row["layer"])], atlas.thresholds, causal=run.is_causal,
                              delimiter_share=delimiter_share)
    if probes is not None:
        rows += probe_labels(probes, atlas.thresholds) + writing_labels(probes, atlas.thresholds)
    atlas.labels = as_label_table(rows)
    heads = list(zip(atlas.table.layer.astype(int), atlas.table["head"].astype(int)))
    strongest = strongest_labels(atlas.labels, heads)
    atlas.table["label"] = [strongest[head][0] for head in heads]
    atlas.table["label_detail"] = [strongest[head][1] for head in heads]


def _assemble(run: StoredRun, entries: list[HeadEntry], settings: AtlasSettings, syntax: bool,
              has_updates: bool) -> HeadAtlas:
    """The atlas of every head's entry, in (layer, head) order."""
    max_offset, width = settings.max_offset, 2 * settings.max_offset + 1
    terms = available_terms(run)
    profiles = np.full((run.n_layers, run.n_heads, width), np.nan)
    supports = np.full((run.n_layers, run.n_heads, len(OFFSET_SUPPORT_ROWS), width), np.nan)
    term_profiles = np.full((run.n_layers, run.n_heads, len(terms), width), np.nan)
    with_embeddings = EmbeddingSplit.of(run) is not None
    embedding_profiles = np.full((run.n_heads, len(EMBEDDING_TERMS), width), np.nan) if with_embeddings else None
    update_histograms = np.zeros((run.n_layers, run.n_heads, 2, UPDATE_BINS)) if has_updates else None
    for entry in entries:
        layer, head = int(entry.row["layer"]), int(entry.row["head"])
        profiles[layer, head] = entry.relative_position
        supports[layer, head] = entry.offset_support
        term_profiles[layer, head] = entry.term_profiles
        if embedding_profiles is not None and entry.embedding_profiles is not None:
            embedding_profiles[head] = entry.embedding_profiles
        if update_histograms is not None:
            update_histograms[layer, head] = entry.update_histograms
    exemplar_table = pd.concat([entry.exemplars for entry in entries], ignore_index=True)[list(EXEMPLAR_COLUMNS)]
    columns = ["layer", "head", *STATISTICS, *(IMAGE_STATISTICS if run.is_image_run else ()),
               *(VALUE_STATISTICS if run.has_output_norms else ()),
               *(SYNTAX_STATISTICS if syntax else ()),
               *(f"share_{term}" for term in terms),
               *(f"embed_share_{term}" for term in (EMBEDDING_TERMS if with_embeddings else ())),
               *(UPDATE_STATISTICS if has_updates else ()), *(() if run.is_image_run else REPEAT_STATISTICS),
               "label", "label_detail"]
    return HeadAtlas(pd.DataFrame([entry.row for entry in entries], columns=columns), profiles, exemplar_table,
                     max_offset, settings.thresholds, terms, term_profiles, update_histograms, embedding_profiles,
                     offset_support=supports)


def _warn_about_missing_parts(run: StoredRun, has_updates: bool) -> None:
    if not has_updates:
        logger.warning("%s was extracted without %s, so head updates are left out; the other statistics are "
                       "computed (extract with %s to add them)", run.path, option("head_update"), option("head_update"))
    if "logit_parts" not in run.manifest:
        logger.warning("%s was extracted before qkviz captured biases and rotary tables, so its logits are not "
                       "decomposed; extract it again with %s to add them", run.path, option("overwrite"))


def _atlas_directory(run: StoredRun) -> ArtifactDirectory:
    return ArtifactDirectory(run, run_files.ATLAS_DIRECTORY, run_files.ATLAS_MARKER, ATLAS_SCHEMA_VERSION,
                             "qkviz stats")


def store_atlas(run: StoredRun, atlas: HeadAtlas) -> Path:
    """Write the atlas into ``<run>/stats/`` (data files first, ``atlas.json`` last)."""
    return _atlas_directory(run).write(
        arrays={run_files.ATLAS_PROFILES: atlas.relative_position, run_files.ATLAS_TERM_PROFILES: atlas.term_profiles,
                run_files.ATLAS_UPDATE_HISTOGRAMS: atlas.update_histograms,
                run_files.ATLAS_EMBEDDING_PROFILES: atlas.embedding_profiles,
                run_files.ATLAS_OFFSET_SUPPORT: atlas.offset_support},
        tables={run_files.ATLAS_TABLE: atlas.table, run_files.ATLAS_EXEMPLARS: atlas.exemplars,
                run_files.ATLAS_LABELS: atlas.labels, run_files.ATLAS_PROBES: atlas.probes},
        marker={"max_offset": atlas.max_offset, "thresholds": atlas.thresholds.as_dict(), "probe_note": atlas.probe_note,
                "writes_note": atlas.writes_note,
                "statistics": [name for name in (*STATISTICS, *IMAGE_STATISTICS, *VALUE_STATISTICS)
                               if name in atlas.table],
                "terms": list(atlas.terms)})


def load_atlas(run: StoredRun) -> HeadAtlas | None:
    """The run's stored atlas, or ``None`` when there is none (or it belongs to another extraction)."""
    stored = _atlas_directory(run)
    marker = stored.read_marker()
    if marker is None:
        return None
    atlas = HeadAtlas(stored.table(run_files.ATLAS_TABLE), stored.array(run_files.ATLAS_PROFILES),
                      stored.table(run_files.ATLAS_EXEMPLARS), int(marker["max_offset"]),
                      LabelThresholds(**marker["thresholds"]), tuple(marker["terms"]),
                      stored.array(run_files.ATLAS_TERM_PROFILES),
                      stored.optional_array(run_files.ATLAS_UPDATE_HISTOGRAMS),
                      stored.optional_array(run_files.ATLAS_EMBEDDING_PROFILES),
                      stored.optional_table(run_files.ATLAS_LABELS), stored.optional_table(run_files.ATLAS_PROBES),
                      str(marker.get("probe_note", "")), stored.optional_array(run_files.ATLAS_OFFSET_SUPPORT))
    atlas.writes_note = str(marker.get("writes_note", ""))
    return atlas
