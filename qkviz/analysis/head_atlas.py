"""The head atlas of a run: every head's statistics, label, relative-position profile and exemplars.

Stored in ``<run>/stats/``: ``head_stats.parquet`` (one row per layer and head: the
:data:`qkviz.analysis.head_stats.STATISTICS`, with ``--syntax`` also :data:`qkviz.analysis.syntax.SYNTAX_STATISTICS`,
``label``, ``label_detail``), ``relative_position.npy``
(float64 ``[layer, head, 2 * max_offset + 1]``, offset ``-max_offset`` first),
``exemplars.parquet`` (``layer, head, rank, sentence, query, key, weight, query_token,
key_token, text``), ``term_profiles.npy`` (``[layer, head, term, offset]``: the attention of each
logit term alone by relative position; the terms' variance shares are ``share_<term>`` columns),
and for runs extracted with ``--head-update`` ``update_histograms.npy`` (``[layer, head, 2, bins]``:
shares of tokens by log10 update ratio and by cosine; ``UPDATE_STATISTICS`` columns), and for
absolute-position models ``embedding_profiles.npy`` (the first layer's token / position split,
``[head, term, offset]``; ``embed_share_<term>`` columns) and ``atlas.json``, written last: the run's fingerprint, the thresholds and
the offset range. Without a matching ``atlas.json`` there is no atlas.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from qkviz.store import files as run_files
from qkviz.analysis.attention_batches import sentence_batches
from qkviz.analysis.head_labels import LabelThresholds, head_label
from qkviz.analysis.head_stats import DEFAULT_MAX_OFFSET, STATISTICS, TokenKinds, head_statistics
from qkviz.analysis.logit_decomposition import (EMBEDDING_TERMS, EmbeddingSplit, available_terms, decompose_embeddings,
                                       decompose_head)
from qkviz.store.artifacts import ArtifactDirectory
from qkviz.core.errors import QkvizError
from qkviz.store.run import StoredRun, as_run
from qkviz.analysis.syntax import SYNTAX_STATISTICS, TokenSyntax, batch_syntax

logger = logging.getLogger(__name__)

ATLAS_SCHEMA_VERSION = 2   # 2: logit terms, term and embedding profiles, head-update histograms
EXEMPLAR_COLUMNS = ("layer", "head", "rank", "sentence", "query", "key", "weight", "query_token", "key_token", "text")
UPDATE_STATISTICS = ("update_ratio_median", "update_cosine_mean")
UPDATE_BINS = 40
UPDATE_RATIO_RANGE = (-3.0, 1.0)   # log10 of |update| / |hidden|


@dataclass
class HeadAtlas:
    table: pd.DataFrame          # one row per (layer, head)
    relative_position: np.ndarray  # [layer, head, 2 * max_offset + 1]
    exemplars: pd.DataFrame
    max_offset: int
    thresholds: LabelThresholds
    terms: tuple[str, ...] = ("content",)   # logit terms (qkviz.analysis.logit_decomposition); shares are share_<term> columns
    term_profiles: np.ndarray | None = None  # [layer, head, term, 2 * max_offset + 1]
    update_histograms: np.ndarray | None = None  # [layer, head, 2, UPDATE_BINS] with --head-update runs
    #: absolute-position models: [head, EMBEDDING_TERMS, 2 * max_offset + 1] of the first layer
    #: (shares: embed_share_<term> columns, NaN past layer 0)
    embedding_profiles: np.ndarray | None = None

    @property
    def offsets(self) -> np.ndarray:
        return np.arange(-self.max_offset, self.max_offset + 1)


def compute_stats(run: StoredRun | str | Path, *, max_offset: int = DEFAULT_MAX_OFFSET, argmax_share: float = 0.5,
                  broad_entropy: float = 0.8, exemplars: int = 5, syntax: bool = False,
                  progress: bool = True) -> HeadAtlas:
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
    exemplars
        Exemplar sentences kept per head.
    syntax
        Also attention to each part of speech and dependency alignment (needs the ``syntax`` extra).
    progress
        Show progress bars.

    Returns
    -------
    HeadAtlas
        The atlas, as :meth:`qkviz.Run.atlas` reads it back.
    """
    run = as_run(run)
    if max_offset < 1 or exemplars < 0:
        raise QkvizError(f"max_offset must be at least 1 and exemplars at least 0, got {max_offset} and {exemplars}")
    for name, value in (("argmax_share", argmax_share), ("broad_entropy", broad_entropy)):
        if not 0 < value <= 1:
            raise QkvizError(f"{name} must be in (0, 1], got {value}")
    atlas = compute_atlas(run, LabelThresholds(argmax_share, broad_entropy), max_offset, exemplars, syntax=syntax,
                          progress=progress)
    directory = store_atlas(run, atlas)
    counts = atlas.table.label.value_counts()
    logger.info("%s: %d heads; labels: %s", directory, len(atlas.table),
                ", ".join(f"{label} {count}" for label, count in counts.items()))
    return atlas


def compute_atlas(run: StoredRun, thresholds: LabelThresholds = LabelThresholds(), max_offset: int = DEFAULT_MAX_OFFSET,
                  n_exemplars: int = 5, syntax: bool = False, progress: bool = False) -> HeadAtlas:
    """Statistics of every head (attention recomputed from the stored vectors, batch by batch);
    with ``syntax``, also the part-of-speech and dependency statistics of :mod:`qkviz.analysis.syntax`."""
    from tqdm.auto import tqdm

    kinds, batches = TokenKinds.of(run), sentence_batches(run)
    syntax_batches = None
    if syntax:
        token_syntax = TokenSyntax.parse(run)
        syntax_batches = [batch_syntax(token_syntax, batch) for batch in batches]
    rows, exemplars = [], []
    profiles = np.full((run.n_layers, run.n_heads, 2 * max_offset + 1), np.nan)
    terms = available_terms(run)
    term_profiles = np.full((run.n_layers, run.n_heads, len(terms), 2 * max_offset + 1), np.nan)
    split_first = EmbeddingSplit.of(run)
    embedding_profiles = (np.full((run.n_heads, len(EMBEDDING_TERMS), 2 * max_offset + 1), np.nan)
                          if split_first is not None else None)
    has_updates = run.has_part(run_files.HEAD_UPDATES)
    update_histograms = np.zeros((run.n_layers, run.n_heads, 2, UPDATE_BINS)) if has_updates else None
    _warn_about_missing_parts(run, has_updates)
    with tqdm(total=run.n_layers * run.n_heads, unit="head", desc="head statistics", disable=not progress,
              dynamic_ncols=True) as bar:
        for layer in range(run.n_layers):
            for head in range(run.n_heads):
                found = head_statistics(run, layer, head, kinds, batches, max_offset, n_exemplars, syntax_batches)
                label, detail = head_label(found.values, thresholds)
                split = decompose_head(run, layer, head, batches, max_offset)
                shares = {f"share_{term}": float(share) for term, share in zip(split.terms, split.variance_share)}
                rows.append({"layer": layer, "head": head, **found.values, **shares, "label": label,
                             "label_detail": detail})
                profiles[layer, head] = found.relative_position
                term_profiles[layer, head] = split.profiles
                if split_first is not None and layer == 0:
                    embedded = decompose_embeddings(run, split_first, head, batches, max_offset)
                    rows[-1].update({f"embed_share_{term}": float(share)
                                     for term, share in zip(embedded.terms, embedded.variance_share)})
                    embedding_profiles[head] = embedded.profiles
                if has_updates:
                    summary, update_histograms[layer, head] = head_update_summary(run.head_updates(layer, head))
                    rows[-1].update(summary)
                exemplars.append(_exemplar_rows(run, found.exemplars, layer, head))
                bar.update()
    exemplar_table = pd.concat(exemplars, ignore_index=True)[list(EXEMPLAR_COLUMNS)]
    columns = ["layer", "head", *STATISTICS, *(SYNTAX_STATISTICS if syntax else ()),
               *(f"share_{term}" for term in terms),
               *(f"embed_share_{term}" for term in (EMBEDDING_TERMS if split_first is not None else ())),
               *(UPDATE_STATISTICS if has_updates else ()), "label", "label_detail"]
    return HeadAtlas(pd.DataFrame(rows, columns=columns), profiles, exemplar_table, max_offset, thresholds,
                     terms, term_profiles, update_histograms, embedding_profiles)


def _warn_about_missing_parts(run: StoredRun, has_updates: bool) -> None:
    if not has_updates:
        logger.warning("%s was extracted without --head-update, so head updates are left out; the other "
                       "statistics are computed (extract with --head-update to add them)", run.path)
    if "logit_parts" not in run.manifest:
        logger.warning("%s was extracted before qkviz captured biases and rotary tables, so its logits are not "
                       "decomposed; extract it again with --overwrite to add them", run.path)


def _exemplar_rows(run: StoredRun, exemplars: pd.DataFrame, layer: int, head: int) -> pd.DataFrame:
    """A head's exemplars (:class:`qkviz.analysis.head_stats.HeadStatistics`) with the head, rank, tokens and text."""
    top = exemplars.assign(layer=layer, head=head, rank=np.arange(len(exemplars)))
    first = run.sentences.first_token.to_numpy()[top.sentence.to_numpy()]
    tokens = run.tokens.token.to_numpy()
    top["query_token"] = tokens[first + top["query"].to_numpy()]
    top["key_token"] = tokens[first + top["key"].to_numpy()]
    top["text"] = run.sentences.text.to_numpy()[top.sentence.to_numpy()]
    return top


def head_update_summary(updates: np.ndarray) -> tuple[dict[str, float], np.ndarray]:
    """``UPDATE_STATISTICS`` of one head's ``[token, 2]`` updates, and their histograms ``[2, UPDATE_BINS]``
    (log10 of the norm ratio over :data:`UPDATE_RATIO_RANGE`, cosine over [-1, 1]; shares of tokens)."""
    ratio, cosine = updates[:, 0].astype(np.float64), updates[:, 1].astype(np.float64)
    log_ratio = np.clip(np.log10(np.maximum(ratio, 1e-12)), *UPDATE_RATIO_RANGE)
    histograms = np.stack([np.histogram(log_ratio, UPDATE_BINS, UPDATE_RATIO_RANGE)[0],
                           np.histogram(cosine, UPDATE_BINS, (-1.0, 1.0))[0]]) / max(len(ratio), 1)
    return ({"update_ratio_median": float(np.median(ratio)), "update_cosine_mean": float(cosine.mean())},
            histograms)


def _atlas_directory(run: StoredRun) -> ArtifactDirectory:
    return ArtifactDirectory(run, run_files.ATLAS_DIRECTORY, run_files.ATLAS_MARKER, ATLAS_SCHEMA_VERSION,
                             "qkviz stats")


def store_atlas(run: StoredRun, atlas: HeadAtlas) -> Path:
    """Write the atlas into ``<run>/stats/`` (data files first, ``atlas.json`` last)."""
    return _atlas_directory(run).write(
        arrays={run_files.ATLAS_PROFILES: atlas.relative_position, run_files.ATLAS_TERM_PROFILES: atlas.term_profiles,
                run_files.ATLAS_UPDATE_HISTOGRAMS: atlas.update_histograms,
                run_files.ATLAS_EMBEDDING_PROFILES: atlas.embedding_profiles},
        tables={run_files.ATLAS_TABLE: atlas.table, run_files.ATLAS_EXEMPLARS: atlas.exemplars},
        marker={"max_offset": atlas.max_offset, "thresholds": atlas.thresholds.as_dict(),
                "statistics": list(STATISTICS), "terms": list(atlas.terms)})


def load_atlas(run: StoredRun) -> HeadAtlas | None:
    """The run's stored atlas, or ``None`` when there is none (or it belongs to another extraction)."""
    stored = _atlas_directory(run)
    marker = stored.read_marker()
    if marker is None:
        return None
    return HeadAtlas(stored.table(run_files.ATLAS_TABLE), stored.array(run_files.ATLAS_PROFILES),
                     stored.table(run_files.ATLAS_EXEMPLARS), int(marker["max_offset"]),
                     LabelThresholds(**marker["thresholds"]), tuple(marker["terms"]),
                     stored.array(run_files.ATLAS_TERM_PROFILES),
                     stored.optional_array(run_files.ATLAS_UPDATE_HISTOGRAMS),
                     stored.optional_array(run_files.ATLAS_EMBEDDING_PROFILES))
