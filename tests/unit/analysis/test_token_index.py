"""The token index: the same answers as a scan of the token table, stored and reloaded intact."""

import shutil

import numpy as np

from qkviz.store.run import open_stored_run
from qkviz.search.token_index import TokenIndex, load_token_index, normalise, run_token_index, store_token_index, token_index_path


def scan(texts, query, substring=False):
    """The reference: a plain loop over every token."""
    needle = query.strip().lower()
    if not needle:
        return []
    return [i for i, text in enumerate(normalise(texts)) if (needle in text if substring else text == needle)]


def test_whole_and_substring_queries_equal_a_scan():
    texts = ["The", "cat", " the", "theme", "THE ", ".", "[CLS]", "a.b", "", "ethe"]
    index = TokenIndex.build(texts)
    for query in ("the", "  THE ", "he", "e", ".", "[cls]", "cls", "a.b", "x", "", "   ", "the theme", "t.e"):
        for substring in (False, True):
            assert index.find(query, substring).tolist() == scan(texts, query, substring), (query, substring)
    assert index.find("\x00", True).tolist() == []


def test_every_vocabulary_entry_of_a_real_run_finds_its_tokens(tiny_run):
    run = tiny_run("gpt2")
    texts = run.tokens.token.tolist()
    index = TokenIndex.build(texts)
    assert index.n_tokens == run.n_tokens and len(index.vocabulary) == len(set(normalise(texts)))
    for entry in index.vocabulary[::7]:
        assert index.find(entry).tolist() == scan(texts, entry)
        assert index.find(entry[1:3], substring=True).tolist() == scan(texts, entry[1:3], substring=True)


def test_stored_index_round_trips_and_a_foreign_one_is_not_read(tiny_run, tmp_path):
    run = open_stored_run(shutil.copytree(tiny_run("bert").path, tmp_path / "run"))
    assert load_token_index(run) is None
    built = run_token_index(run)                                   # built in memory when none is stored
    store_token_index(run, built)
    loaded = load_token_index(run)
    assert loaded is not None
    for name in ("vocabulary", "offsets", "postings"):
        assert np.array_equal(getattr(loaded, name), getattr(built, name))
    assert loaded.find("the", True).tolist() == built.find("the", True).tolist()
    other = open_stored_run(shutil.copytree(tiny_run("gpt2").path, tmp_path / "other"))
    shutil.copy(token_index_path(run.path), token_index_path(other.path).parent.mkdir(parents=True) or
                token_index_path(other.path))
    assert load_token_index(other) is None                         # another run's fingerprint
    token_index_path(run.path).write_bytes(b"not parquet")
    assert load_token_index(run) is None
