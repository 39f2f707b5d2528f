"""The token index of a run: which tokens carry a given text, answered without scanning the corpus.

Every token's text is normalised (surrounding spaces stripped, lower-cased). The index keeps the
sorted vocabulary of normalised texts and, for each entry, the sorted indices of its tokens
(``postings``, in CSR form: ``offsets[v]:offsets[v + 1]``). A whole-token query is a binary search
in the vocabulary; a substring query scans the vocabulary -- a few thousand entries joined into
one string, searched by the regular-expression engine -- never the tokens.

On disk it is ``<run>/indexes/tokens.parquet``: one row per vocabulary entry (``text``,
``tokens`` as a list of int64), plus the run's fingerprint and :data:`TOKEN_INDEX_SCHEMA_VERSION`
in the file's metadata; written to a temporary file and renamed, so a half-written index is never
read. A run without the file gets its index built in memory from the token table (milliseconds).
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from qkviz.store import files as run_files

logger = logging.getLogger(__name__)

TOKEN_INDEX_SCHEMA_VERSION = 1
#: separates vocabulary entries in the joined string substring queries scan (never part of a token's text)
_SEPARATOR = "\x00"


def normalise(texts) -> np.ndarray:
    """``[token]`` object array: each text stripped of surrounding spaces and lower-cased."""
    return pd.Series(texts, dtype=object).astype(str).str.strip().str.lower().to_numpy(dtype=object)


@dataclass(frozen=True)
class TokenIndex:
    """``vocabulary`` str ``[V]`` sorted; ``offsets`` int64 ``[V + 1]``; ``postings`` int64 ``[n_tokens]``."""

    vocabulary: np.ndarray
    offsets: np.ndarray
    postings: np.ndarray

    @classmethod
    def build(cls, texts) -> "TokenIndex":
        """The index of ``texts`` (``[token]`` raw token strings, in storage order)."""
        normalised = normalise(texts)
        vocabulary, inverse = np.unique(normalised.astype(str), return_inverse=True)
        postings = np.argsort(inverse, kind="stable").astype(np.int64)        # tokens grouped by entry, in order
        offsets = np.concatenate([[0], np.cumsum(np.bincount(inverse, minlength=len(vocabulary)))]).astype(np.int64)
        return cls(vocabulary, offsets, postings)

    @property
    def n_tokens(self) -> int:
        return int(len(self.postings))

    def entry(self, text: str) -> int | None:
        """The vocabulary entry of normalised ``text``, or None."""
        at = int(np.searchsorted(self.vocabulary, text))
        return at if at < len(self.vocabulary) and self.vocabulary[at] == text else None

    def entries_containing(self, needle: str) -> np.ndarray:
        """int64 vocabulary entries whose text contains ``needle`` (plain text, not a pattern)."""
        starts = self._entry_starts
        found = [match.start() for match in re.finditer(re.escape(needle), self._joined)]
        return np.unique(np.searchsorted(starts, np.asarray(found, dtype=np.int64), side="right") - 1)

    def find(self, query: str, substring: bool = False) -> np.ndarray:
        """Sorted int64 indices of the tokens whose normalised text is ``query`` (normalised), or contains it."""
        needle = (query or "").strip().lower()
        if not needle or _SEPARATOR in needle:
            return np.zeros(0, dtype=np.int64)
        if not substring:
            entry = self.entry(needle)
            return np.zeros(0, dtype=np.int64) if entry is None else self.postings[self.offsets[entry]:self.offsets[entry + 1]]
        entries = self.entries_containing(needle)
        if not len(entries):
            return np.zeros(0, dtype=np.int64)
        lengths = self.offsets[entries + 1] - self.offsets[entries]
        rows = np.repeat(self.offsets[entries] - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum())
        return np.sort(self.postings[rows])

    # the joined vocabulary, made on first substring query
    @property
    def _joined(self) -> str:
        self._prepare_substring()
        return self.__dict__["_joined_text"]

    @property
    def _entry_starts(self) -> np.ndarray:
        self._prepare_substring()
        return self.__dict__["_starts"]

    def _prepare_substring(self) -> None:
        if "_joined_text" not in self.__dict__:
            lengths = np.fromiter((len(text) + 1 for text in self.vocabulary), dtype=np.int64, count=len(self.vocabulary))
            object.__setattr__(self, "_joined_text", _SEPARATOR.join(self.vocabulary.tolist()))
            object.__setattr__(self, "_starts", np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64))


# -- storage ------------------------------------------------------------------------------------
def token_index_path(run_path: Path) -> Path:
    return Path(run_path) / run_files.INDEX_DIRECTORY / run_files.TOKEN_INDEX_FILE


def store_token_index(run, index: TokenIndex) -> Path:
    """Write ``<run>/indexes/tokens.parquet`` atomically (a temporary file, then a rename)."""
    path = token_index_path(run.path)
    path.parent.mkdir(parents=True, exist_ok=True)
    lists = pa.ListArray.from_arrays(pa.array(index.offsets, pa.int32() if index.n_tokens < 2**31 else pa.int64()),
                                     pa.array(index.postings, pa.int64()))
    table = pa.table({"text": pa.array(index.vocabulary.tolist(), pa.string()), "tokens": lists})
    table = table.replace_schema_metadata({"qkviz_schema": str(TOKEN_INDEX_SCHEMA_VERSION),
                                           "run": run.manifest["fingerprint"], "n_tokens": str(index.n_tokens)})
    partial = path.with_name(path.name + ".partial")
    pq.write_table(table, partial)
    os.replace(partial, path)
    return path


def load_token_index(run) -> TokenIndex | None:
    """The stored index of ``run``, or None when absent, of another run or schema, or unreadable."""
    path = token_index_path(run.path)
    if not path.exists():
        return None
    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as error:
        logger.warning("token index %s is unreadable (%s); it is rebuilt in memory", path, error)
        return None
    metadata = {key.decode(): value.decode() for key, value in (table.schema.metadata or {}).items()}
    if (metadata.get("qkviz_schema") != str(TOKEN_INDEX_SCHEMA_VERSION) or metadata.get("run") != run.manifest["fingerprint"]
            or metadata.get("n_tokens") != str(run.n_tokens)):
        logger.warning("token index %s belongs to another run or qkviz version; it is rebuilt in memory", path)
        return None
    lists = table.column("tokens").combine_chunks()
    vocabulary = np.asarray(table.column("text").to_pylist(), dtype=str)
    offsets, postings = np.asarray(lists.offsets, dtype=np.int64), np.asarray(lists.values, dtype=np.int64)
    intact = (len(offsets) == len(vocabulary) + 1 and offsets[0] == 0 and offsets[-1] == len(postings)
              and bool(np.all(np.diff(offsets) >= 0)) and (len(postings) == 0 or (postings.min() >= 0
                                                                                 and postings.max() < run.n_tokens)))
    if not intact:     # a file changed in place: its postings would point outside the run
        logger.warning("token index %s is damaged; it is rebuilt in memory (make it again with 'qkviz index')", path)
        return None
    return TokenIndex(vocabulary, offsets, postings)


def run_token_index(run) -> TokenIndex:
    """The run's stored token index, or one built from its token table when there is none."""
    index = load_token_index(run)
    return index if index is not None else TokenIndex.build(run.tokens.token)
