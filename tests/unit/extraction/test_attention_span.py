"""How far a model's attention reaches (qkviz.extraction.gate.attention_span): the spans a configuration declares, the
widest of them and of the layers' windows, and the long gate input's size and rows."""

from types import SimpleNamespace

import numpy as np

from qkviz.extraction.gate.attention_span import (SPAN_MARGIN, affordable_tokens, compared_rows, configured_spans,
                                             long_input_tokens, widest_span)
from qkviz.extraction.capture.recorder import LayerAttentionSettings


def test_each_family_names_its_span_and_a_switched_off_window_is_none():
    assert configured_spans(SimpleNamespace(sliding_window=4096)) == [4096]                     # Mistral
    assert configured_spans(SimpleNamespace(window_size=256)) == [256]                          # GPT-Neo
    assert configured_spans(SimpleNamespace(local_attention=128, sliding_window=64)) == [64, 128]  # ModernBERT
    assert configured_spans(SimpleNamespace(attention_chunk_size=8192)) == [8192]               # Llama 4
    assert configured_spans(SimpleNamespace(sliding_window=4096, use_sliding_window=False)) == []   # Qwen2
    assert configured_spans(SimpleNamespace(sliding_window=0, max_position_embeddings=512)) == []
    nested = SimpleNamespace(text_config=SimpleNamespace(sliding_window=1024))
    assert configured_spans(nested) == [1024]


def test_the_widest_span_counts_the_windows_layers_pass():
    full = LayerAttentionSettings(0.125, True, None, None)
    windowed = LayerAttentionSettings(0.125, True, 96, None)
    assert widest_span(SimpleNamespace(), [full, full]) is None
    assert widest_span(SimpleNamespace(), [full, windowed]) == 96
    assert widest_span(SimpleNamespace(sliding_window=64), [windowed]) == 96


def test_the_long_input_reaches_past_the_span_and_compares_its_last_rows():
    assert long_input_tokens(100, 1000) == 100 + SPAN_MARGIN
    assert long_input_tokens(100, 110) == 110
    rows = compared_rows(100 + SPAN_MARGIN)
    assert set(range(100, 100 + SPAN_MARGIN)) <= set(rows) and rows[0] == 0
    assert np.all(np.diff(rows) > 0) and len(rows) < 100
    assert affordable_tokens(32) ** 2 * 32 * 4 <= 4 * 2**30 < (affordable_tokens(32) + 1) ** 2 * 32 * 4
