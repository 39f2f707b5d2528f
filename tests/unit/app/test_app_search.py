"""The app's token search: matching tokens (token 0 included) and per-head cluster counts on a real run."""

import pandas as pd

from dash_app.data.run_data import RunData
from dash_app.data.token_search import TokenSearch
from qkviz.search.token_index import TokenIndex


def test_whole_token_match_is_case_insensitive_and_counts_the_first_token():
    index = TokenIndex.build(pd.Series(["The", "cat", " the", "theme", "THE ", "."]))
    assert index.find("the").tolist() == [0, 2, 4]
    assert index.find("  THE ").tolist() == [0, 2, 4]
    assert index.find("the", substring=True).tolist() == [0, 2, 3, 4]
    assert index.find("").tolist() == [] and index.find("   ").tolist() == []
    assert index.find("<b>x</b>").tolist() == []
    assert index.find(".").tolist() == [5]          # plain text, never a pattern


def test_counts_agree_with_the_token_table_of_a_real_run(app_run):
    data = RunData(app_run, "tiny")
    search = TokenSearch(data.token_index, lambda method: data.all_layouts(method).points)
    tokens = app_run.tokens.token.str.strip().str.lower()
    first = tokens.iat[0]                                   # the BOS token starts every sentence
    assert search.find(first, False).count == int((tokens == first).sum()) == app_run.n_sentences
    assert search.find("the", False).count == int((tokens == "the").sum()) > 0
    assert search.find("THE", False) is search.find("THE", False)      # cached
    clusters = search.clusters("the", False, "pca")
    assert clusters.shape == (app_run.n_layers * app_run.n_heads,) and (clusters >= 1).all()
