"""Corpora in memory: any iterable of strings, a DataFrame or a Dataset's text column, hashed like a file."""

import numpy as np
import pandas as pd
import pytest

from qkviz.core.errors import QkvizError
from qkviz.extraction.inputs.corpus import load_corpus

SENTENCES = ["The first sentence.", "A second one, with a comma.", "Third!"]


class ColumnarDataset:
    """What qkviz reads of a Hugging Face ``datasets.Dataset`` (``datasets`` is not a dependency): its column
    names and a column by name."""

    def __init__(self, columns: dict[str, list]):
        self._columns = columns
        self.column_names = list(columns)

    def __getitem__(self, name: str) -> list:
        return self._columns[name]


@pytest.mark.parametrize("make", [
    lambda: list(SENTENCES),
    lambda: tuple(SENTENCES),
    lambda: (s for s in SENTENCES),
    lambda: ["  " + SENTENCES[0], "", SENTENCES[1] + "\n", "   ", SENTENCES[2]],   # stripped, blanks skipped
    lambda: pd.Series(SENTENCES, name="text", index=[10, 20, 30]),
    lambda: pd.DataFrame({"id": [1, 2, 3], "text": SENTENCES})["text"],
    lambda: np.array(SENTENCES),
], ids=["list", "tuple", "generator", "blank-items", "series", "frame-column", "numpy"])
def test_iterables_of_strings_hash_like_the_text_file(make, tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("\n".join(SENTENCES), encoding="utf-8")
    from_file = load_corpus(path)
    corpus = load_corpus(make())
    assert corpus.sentences == tuple(SENTENCES)
    assert corpus.sha256 == from_file.sha256 and corpus.text_column is None
    assert "3 sentences in memory" in corpus.source


def test_a_dataset_or_frame_reads_its_text_column_and_hashes_like_a_table(tmp_path):
    table = tmp_path / "c.csv"
    pd.DataFrame({"id": [1, 2, 3], "body": SENTENCES}).to_csv(table, index=False)
    from_table = load_corpus(table, text_column="body")
    for source in (ColumnarDataset({"id": [1, 2, 3], "body": SENTENCES}),
                   pd.DataFrame({"id": [1, 2, 3], "body": SENTENCES})):
        corpus = load_corpus(source, text_column="body")
        assert corpus.sentences == tuple(SENTENCES) and corpus.text_column == "body"
        assert corpus.sha256 == from_table.sha256
        with pytest.raises(QkvizError, match=r"has no column 'text' \(columns: id, body\); choose one with text_column="):
            load_corpus(source)


@pytest.mark.parametrize("source, message", [
    ([], r"has no sentences: it is empty"),
    (iter([" ", ""]), r"has no sentences: it is empty or every item is blank"),
    (["fine", "also fine", 3.5], r"^corpus item 2 is float '3.5', not text; give strings only$"),
    (pd.Series(["a", None, "b"]), r"^corpus item 1 is missing, not text"),
    (pd.Series(["a", "b", np.nan]), r"^corpus item 2 is missing, not text"),
    ([["a list"]], r"^corpus item 0 is list"),
    (b"The cat sat.", r"corpus is bytes; decode it"),
    ({"a": "The cat sat."}, r"corpus is a dict; give an iterable of strings"),
    (42, r"corpus is of type int: give a file path, a dataset name, or an iterable of strings"),
])
def test_bad_corpora_in_memory_are_one_line_errors(source, message):
    with pytest.raises(QkvizError, match=message) as caught:
        load_corpus(source)
    assert "\n" not in str(caught.value)
