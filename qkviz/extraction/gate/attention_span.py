"""How far a model's attention reaches, and the long input that makes the exactness gate see it.

A sliding window (Mistral, Gemma, Qwen, Phi-3), a local window (GPT-Neo's ``window_size``, ModernBERT's
``local_attention``) or an attention chunk (Llama 4's ``attention_chunk_size``) changes nothing on a sequence
shorter than it: a gate on short sentences cannot tell a window qkviz reproduces from one it misses. The
widest such span is read from the configuration and from what the layers passed to attention
(:class:`qkviz.extraction.capture.recorder.LayerAttentionSettings`), both, since a family whose capture misses its window
is exactly the one the gate must catch. Where the run holds a sequence longer than that span, the gate runs once
more on one of them, cut to the span and :data:`SPAN_MARGIN` tokens more, and compares only the rows
:func:`compared_rows` picks (the attention of every head on those rows, over every key); where none is longer,
the window never acts in the run either, and the gate says so.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from qkviz.extraction.capture.recorder import LayerAttentionSettings

#: configuration attributes that bound how far a query attends (in tokens)
SPAN_ATTRIBUTES = ("sliding_window", "window_size", "local_attention", "attention_chunk_size")
#: tokens past the span in the long gate input: the rows where the window or chunk cuts keys off
SPAN_MARGIN = 32
#: rows spread over the rest of the long gate input, besides its last :data:`SPAN_MARGIN`
SPREAD_ROWS = 16
#: the largest ``heads x n x n`` float32 score tensor the long gate lets the model's eager attention build
#: (one layer at a time); a span needing more is left unchecked, and the gate says so
MAX_SCORE_BYTES = 4 * 2**30


def configured_spans(config) -> list[int]:
    """The spans a configuration declares (in tokens; a text config nested in a multimodal one included); a
    ``sliding_window`` that ``use_sliding_window: false`` switches off is none."""
    spans = []
    for part in (config, getattr(config, "text_config", None)):
        if part is None:
            continue
        for name in SPAN_ATTRIBUTES:
            value = getattr(part, name, None)
            if name == "sliding_window" and getattr(part, "use_sliding_window", True) is False:
                continue
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                spans.append(value)
    return spans


def widest_span(config, settings: Iterable[LayerAttentionSettings]) -> int | None:
    """The widest window or chunk of the model (configured or passed by a layer), or None where attention spans
    the whole sequence."""
    spans = configured_spans(config) + [s.sliding_window for s in settings if s.sliding_window]
    return max(spans) if spans else None


def long_input_tokens(span: int, longest: int) -> int:
    """Tokens of the long gate input: the span and :data:`SPAN_MARGIN` more, at most the run's longest sequence."""
    return min(longest, span + SPAN_MARGIN)


def affordable_tokens(n_heads: int) -> int:
    """The longest input whose ``heads x n x n`` float32 scores fit in :data:`MAX_SCORE_BYTES`."""
    return int((MAX_SCORE_BYTES / (4 * n_heads)) ** 0.5)


def compared_rows(n_tokens: int) -> np.ndarray:
    """The query positions the long gate compares: the last :data:`SPAN_MARGIN` (past the span: where the window
    or chunk acts) and :data:`SPREAD_ROWS` spread over the rest, ascending."""
    spread = np.linspace(0, n_tokens - 1, SPREAD_ROWS).round().astype(np.int64)
    tail = np.arange(max(0, n_tokens - SPAN_MARGIN), n_tokens)
    return np.union1d(spread, tail)
