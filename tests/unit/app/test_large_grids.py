"""What keeps the report's atlas page, the app's heads map and an exemplar's text readable at a thousand heads and
over documents of thousands of tokens."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd

from dash_app.views.heads import NAMED_HEADS, named_heads
from qkviz.analysis import excerpt, excerpt_pieces
from qkviz.analysis.documents.text_excerpt import CONTEXT, ELLIPSIS, WHOLE_TEXT
from qkviz.report.atlas_html import EXEMPLARS_BY_LAYER_HEADS, LABELLED_CELLS_HEADS, _exemplar_table, _label_grid


def test_a_short_text_is_whole_and_a_long_one_keeps_the_marked_tokens_with_their_context():
    assert excerpt_pieces("the cat sat", [(4, 7, "q")]) == [("the ", None), ("cat", "q"), (" sat", None)]
    words = [f"w{number}" for number in range(2000)]
    text = " ".join(words)
    query, key = text.index(" w1500 ") + 1, text.index(" w40 ") + 1
    pieces = excerpt_pieces(text, [(query, query + 5, "q"), (key, key + 3, "k")])
    assert [piece for piece, kind in pieces if kind] == ["w40", "w1500"]
    assert pieces[0] == (ELLIPSIS, None) and pieces[-1] == (ELLIPSIS, None)
    assert sum(len(piece) for piece, _ in pieces) <= 2 * (2 * CONTEXT + 5) + 3 * len(ELLIPSIS)
    assert "".join(piece for piece, _ in pieces).count(ELLIPSIS) == 3        # before, between, after
    assert len(excerpt(text, [])) == WHOLE_TEXT + len(ELLIPSIS)
    near = text.index(" w41 ") + 1                                             # two marks close together: one part
    assert excerpt(text, [(key, key + 3), (near, near + 3)]).count(ELLIPSIS) == 2


def atlas_of(n_layers: int, n_heads: int, text: str = "a sentence") -> SimpleNamespace:
    heads = pd.DataFrame([(layer, head) for layer in range(n_layers) for head in range(n_heads)],
                         columns=["layer", "head"])
    table = heads.assign(label=np.where(heads["head"] % 2 == 0, "first-token", "previous-token"))
    exemplars = heads.assign(rank=0, query_token="q", key_token="k", weight=0.5, text=text)
    labels = table.assign(detail="", score=0.9, chance=0.1, threshold=0.3, probe="corpus", queries=400)
    return SimpleNamespace(table=table, exemplars=exemplars, labels=labels)


def test_the_label_grid_writes_labels_in_cells_only_where_they_fit_and_always_has_its_key():
    for n_heads in (12, 32):
        page = _label_grid(atlas_of(4, n_heads))
        assert "previous-token" in page.split("<div")[0]                      # the key above the grid
        assert ('"texttemplate":"%{text}"' in page) == (n_heads <= LABELLED_CELLS_HEADS)


def test_exemplars_of_many_heads_are_folded_by_layer_and_long_documents_are_cut():
    small = _exemplar_table(atlas_of(6, 12))
    assert "<details>" not in small and small.count("<tr>") == 6 * 12 + 1
    big = _exemplar_table(atlas_of(32, 32, text="word " * 3000))
    assert 32 * 32 > EXEMPLARS_BY_LAYER_HEADS and big.count("<details>") == 32
    assert big.count("<tr>") == 32 * 32 + 32 and len(big) < 32 * 32 * (WHOLE_TEXT + 200)


def test_the_heads_map_names_every_head_of_a_small_model_and_only_the_heads_apart_in_a_crowd():
    rng = np.random.default_rng(0)
    assert named_heads(rng.normal(size=(72, 2))).all()
    crowd = np.concatenate([rng.normal(scale=0.01, size=(1020, 2)), [[5, 5], [-5, 5], [5, -5], [-5, -5]]])
    named = named_heads(crowd)
    assert len(crowd) > NAMED_HEADS and named[-4:].all() and not named[:-4].any()


def test_an_excerpt_of_a_pair_on_one_token_keeps_the_text_as_it_is():
    text = "Remove the oil filter before the engine cools. " * 20
    for spans in ([(0, 6), (0, 6)], [(0, 6), (3, 9)], [(7, 10), (0, 6)]):
        assert excerpt(text[:60], spans) == text[:60]
        assert ELLIPSIS not in excerpt(text, spans)[:CONTEXT] and excerpt(text, spans).startswith("Remove the")


def test_a_report_of_a_thousand_heads_samples_fewer_pairs_a_head_and_a_small_model_keeps_them_all():
    from qkviz.analysis.statistics.correlation import DEFAULT_MAX_PAIRS, RUN_PAIR_BUDGET, default_max_pairs

    assert default_max_pairs(SimpleNamespace(n_layers=6, n_heads=12)) == min(DEFAULT_MAX_PAIRS, RUN_PAIR_BUDGET // 72)
    assert default_max_pairs(SimpleNamespace(n_layers=2, n_heads=4)) == DEFAULT_MAX_PAIRS
    assert default_max_pairs(SimpleNamespace(n_layers=32, n_heads=32)) == RUN_PAIR_BUDGET // 1024 == 146_484
