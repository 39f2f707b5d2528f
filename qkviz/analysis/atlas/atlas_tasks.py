"""One head's share of the head atlas, as a pure task: (run path, layer, head, settings) -> :class:`HeadEntry`.

:func:`head_entry` opens the run itself and returns a small, picklable result (the table row, the profiles,
the histograms, the exemplar rows), so :func:`qkviz.analysis.atlas.head_atlas.compute_atlas` runs it in this
process, on a local pool of worker processes or on a Dask cluster alike, and assembles the atlas. What every
head of a run shares (the token kinds, the sentence batches, their syntax, the first layer's embedding split)
is built once per process, on its first head. The spaCy parse (:class:`~qkviz.analysis.statistics.syntax.TokenSyntax`)
is made once, by the caller, and handed to every task: workers never parse.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from qkviz.analysis.statistics.attention_batches import SentenceBatch, release_workspace, sentence_batches
from qkviz.analysis.labels.head_labels import head_label
from qkviz.analysis.labels.registry import LabelThresholds
from qkviz.analysis.statistics.head_stats import head_statistics
from qkviz.analysis.statistics.token_kinds import TokenKinds
from qkviz.analysis.statistics.induction_scores import RepeatSums, RepeatTargets
from qkviz.analysis.statistics.registry import HEAD_UPDATES, statistic_names
from qkviz.analysis.logits.logit_decomposition import EmbeddingSplit, decompose_embeddings, decompose_head, forget_blocks
from qkviz.analysis.statistics.syntax import BatchSyntax, TokenSyntax, batch_syntax
from qkviz.analysis.documents.text_excerpt import excerpt
from qkviz.store import files as run_files
from qkviz.store.manifest import read_manifest
from qkviz.store.run import StoredRun, open_stored_run

EXEMPLAR_COLUMNS = ("layer", "head", "rank", "sentence", "query", "key", "weight", "query_token", "key_token", "text")
UPDATE_STATISTICS = statistic_names(HEAD_UPDATES)
UPDATE_BINS = 40
UPDATE_RATIO_RANGE = (-3.0, 1.0)   # log10 of |update| / |hidden|


@dataclass(frozen=True)
class AtlasSettings:
    """What every head's task is asked for (the parameters of ``qkviz stats``)."""

    max_offset: int
    n_exemplars: int
    thresholds: LabelThresholds


@dataclass
class HeadEntry:
    """One head's part of the atlas (:class:`~qkviz.analysis.atlas.head_atlas.HeadAtlas`)."""

    row: dict[str, object]                 # the head's row of the table: layer, head, statistics, shares, repeats, label
    relative_position: np.ndarray          # [2 * max_offset + 1]
    term_profiles: np.ndarray              # [term, 2 * max_offset + 1]
    exemplars: pd.DataFrame                # EXEMPLAR_COLUMNS
    embedding_profiles: np.ndarray | None = None   # [EMBEDDING_TERMS, 2 * max_offset + 1]: layer 0 of absolute-position models
    update_histograms: np.ndarray | None = None    # [2, UPDATE_BINS]: runs extracted with --head-update
    offset_support: np.ndarray | None = None       # [OFFSET_SUPPORT_ROWS, 2 * max_offset + 1] (head_stats)


@dataclass
class _RunState:
    """What every head of one run shares in a process."""

    run: StoredRun
    kinds: TokenKinds
    batches: list[SentenceBatch]
    syntax: list[BatchSyntax] | None
    split_first: EmbeddingSplit | None
    has_updates: bool
    repeats: RepeatTargets | None      # where a text run's corpus repeats itself (None for image runs)


#: (run path, fingerprint, with syntax) -> the run's shared state: built on a process's first head of the run
_STATES: dict[tuple[str, str, bool], _RunState] = {}


def head_entry(run_path: str, layer: int, head: int, settings: AtlasSettings,
               token_syntax: TokenSyntax | None = None) -> HeadEntry:
    """The atlas entry of one head: its statistics (with ``token_syntax`` also the syntax ones), label,
    relative-position and term profiles, embedding profile (layer 0, where the model adds position
    embeddings), head-update histograms (where extracted) and exemplar rows."""
    state = _run_state(run_path, token_syntax)
    run = state.run
    rule = run.logit_rule(layer, head)
    repeats = None if state.repeats is None else RepeatSums(state.repeats, (rule.causal, rule.window, rule.chunk))
    found = head_statistics(run, layer, head, state.kinds, state.batches, settings.max_offset, settings.n_exemplars,
                            state.syntax, observers=[] if repeats is None else [repeats])
    label, detail = head_label(found.values, settings.thresholds)
    split = decompose_head(run, layer, head, state.batches, settings.max_offset)
    row: dict[str, object] = {"layer": layer, "head": head, **found.values,
                              **{f"share_{term}": float(share) for term, share in zip(split.terms, split.variance_share)},
                              "label": label, "label_detail": detail}
    if repeats is not None:
        row.update(repeats.values())
    entry = HeadEntry(row, found.relative_position, split.profiles, exemplar_rows(run, found.exemplars, layer, head),
                      offset_support=found.offset_support)
    if state.split_first is not None and layer == 0:
        embedded = decompose_embeddings(run, state.split_first, head, state.batches, settings.max_offset)
        row.update({f"embed_share_{term}": float(share) for term, share in zip(embedded.terms, embedded.variance_share)})
        entry.embedding_profiles = embedded.profiles
    if state.has_updates:
        summary, entry.update_histograms = head_update_summary(run.head_updates(layer, head))
        row.update(summary)
    return entry


def _run_state(run_path: str, token_syntax: TokenSyntax | None) -> _RunState:
    path = str(Path(run_path).absolute())
    key = (path, str(read_manifest(Path(path))["fingerprint"]), token_syntax is not None)
    if key not in _STATES:
        _STATES.clear()                 # one run at a time: keep only its state
        forget_blocks()
        run = open_stored_run(path)
        batches = sentence_batches(run)
        _STATES[key] = _RunState(
            run, TokenKinds.of(run), batches,
            None if token_syntax is None else [batch_syntax(token_syntax, batch) for batch in batches],
            EmbeddingSplit.of(run), run.has_part(run_files.HEAD_UPDATES),
            None if run.is_image_run else RepeatTargets.of(run, batches))
    return _STATES[key]


def exemplar_rows(run: StoredRun, exemplars: pd.DataFrame, layer: int, head: int) -> pd.DataFrame:
    """A head's exemplars (:class:`qkviz.analysis.statistics.head_stats.HeadStatistics`) with the head, rank, tokens and text:
    the sentence, or of a long document the text around the pair (:func:`qkviz.analysis.documents.text_excerpt.excerpt`)."""
    top = exemplars.assign(layer=layer, head=head, rank=np.arange(len(exemplars)))
    first = run.sentences.first_token.to_numpy()[top.sentence.to_numpy()]
    tokens = run.tokens
    query, key = first + top["query"].to_numpy(), first + top["key"].to_numpy()
    top["query_token"] = tokens.token.to_numpy()[query]
    top["key_token"] = tokens.token.to_numpy()[key]
    starts, ends = tokens.char_start.to_numpy(), tokens.char_end.to_numpy()
    top["text"] = [excerpt(str(text), [(int(starts[q]), int(ends[q])), (int(starts[k]), int(ends[k]))])
                   for text, q, k in zip(run.sentences.text.to_numpy()[top.sentence.to_numpy()], query, key)]
    return top[list(EXEMPLAR_COLUMNS)]


def head_update_summary(updates: np.ndarray) -> tuple[dict[str, float], np.ndarray]:
    """``UPDATE_STATISTICS`` of one head's ``[token, 2]`` updates, and their histograms ``[2, UPDATE_BINS]``
    (log10 of the norm ratio over :data:`UPDATE_RATIO_RANGE`, cosine over [-1, 1]; shares of tokens)."""
    ratio, cosine = updates[:, 0].astype(np.float64), updates[:, 1].astype(np.float64)
    log_ratio = np.clip(np.log10(np.maximum(ratio, 1e-12)), *UPDATE_RATIO_RANGE)
    histograms = np.stack([np.histogram(log_ratio, UPDATE_BINS, UPDATE_RATIO_RANGE)[0],
                           np.histogram(cosine, UPDATE_BINS, (-1.0, 1.0))[0]]) / max(len(ratio), 1)
    return ({"update_ratio_median": float(np.median(ratio)), "update_cosine_mean": float(cosine.mean())},
            histograms)


def forget_run_states() -> None:
    """Drop this process's shared state (the caller's, once its serial atlas is made), its workspace and the
    decomposition's blocks."""
    _STATES.clear()
    release_workspace()
    forget_blocks()
