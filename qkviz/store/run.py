"""Reading a finished run: ``qkviz.open_run(path)``.

Shapes everywhere are ``[layer, head, token, d_head]``. Vectors are memory-mapped, so opening a
run and reading one head costs only that head's bytes; every accessor returns float32.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from qkviz.core import attention
from qkviz.core.logit_rule import LogitRule
from qkviz.store import files as run_files
from qkviz.core.errors import IncompleteRunError, QkvizError
from qkviz.core.option_names import option
from qkviz.store.manifest import read_manifest, with_checksums

TOKEN_COLUMNS = ("sentence", "position", "token", "piece", "token_id", "char_start", "char_end",
                 "is_special", "sentence_chars")
SENTENCE_COLUMNS = ("sentence", "corpus_index", "text", "first_token", "n_tokens", "truncated", "token_offset",
                    "char_offset")
#: what :meth:`StoredRun.attention` weights a pair by: its attention, or its attention times the key's output norm
WEIGHTINGS = ("attention", "value")
#: columns a run written before they existed reads with a default: a sequence is a whole corpus item
SENTENCE_DEFAULTS = {"token_offset": 0, "char_offset": 0}


def open_stored_run(path: str | Path, *, read_only: bool = False) -> "StoredRun":
    """Open a complete run directory written by ``qkviz extract`` as the store's :class:`StoredRun`
    (``qkviz.open_run`` opens it as the public ``qkviz.Run``, which extends it)."""
    return StoredRun(path, read_only=read_only)


def as_run(run: "StoredRun | str | Path") -> "StoredRun":
    """``run`` itself when it is an opened run, else the run at that path."""
    return run if isinstance(run, StoredRun) else StoredRun(run)


class StoredRun:
    """A complete extraction: per-head queries, keys and value norms plus the token table.

    A run whose manifest lacks its files' checksums gets them when opened (:func:`with_checksums`); with
    ``read_only`` nothing is written into the run by opening it (such a run is refused) nor by what reads it
    (``run.projection`` makes no layout)."""

    def __init__(self, path: str | Path, *, read_only: bool = False):
        self.path = Path(path)
        self.read_only = read_only
        self.manifest = with_checksums(self.path, read_manifest(self.path), read_only)
        shape = self.manifest["shape"]
        self.n_layers: int = shape["n_layers"]
        self.n_heads: int = shape["n_heads"]
        self.n_kv_heads: int = shape["n_kv_heads"]
        self.head_dim: int = shape["head_dim"]
        self.n_tokens: int = self.manifest["counts"]["n_tokens"]
        self.n_sentences: int = self.manifest["counts"]["n_sentences"]
        self.model_id: str = self.manifest["model"]["id"]
        self.family: str = self.manifest["model"]["family"]
        self.is_causal: bool = self.manifest["attention"]["causal"]
        self.dtype: str = self.manifest["dtype"]

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({str(self.path)!r}, model={self.model_id!r}, layers={self.n_layers}, heads={self.n_heads}, "
                f"kv_heads={self.n_kv_heads}, tokens={self.n_tokens})")

    # -- tables -------------------------------------------------------------------------------
    def verified(self, name: str) -> Path:
        """The path of the run's file ``name``, checked against the manifest's sha256 (once per file and process;
        every file has one, :func:`with_checksums`); damage is an IncompleteRunError."""
        path = self.path / name
        expected = self.manifest["sha256"].get(name)
        if expected is None:       # a file the manifest does not list: never read as if it were checked
            raise IncompleteRunError(f"{self.path} has no {name} in its manifest; extract the run again with "
                                     f"{option('overwrite')}")
        if not run_files.matches_checksum(path, expected):
            raise IncompleteRunError(f"{self.path} is damaged: {name} does not match its checksum (changed after "
                                     f"extraction); extract the run again with {option('overwrite')}")
        return path

    def check_files(self) -> None:
        """Check every file of the run against its checksum now (commands call it before their work, so that
        damage is one line up front rather than a failure per head)."""
        for name in self.manifest["files"]:
            self.verified(name)

    @cached_property
    def tokens(self) -> pd.DataFrame:
        """One row per token, in storage order: ``TOKEN_COLUMNS``."""
        return pd.read_parquet(self.verified(run_files.TOKENS))

    @cached_property
    def sentences(self) -> pd.DataFrame:
        """One row per sentence: ``SENTENCE_COLUMNS``; a sentence's tokens are contiguous. A window of a long
        document (``--chunk``) is a sentence whose ``corpus_index`` is its document and whose ``token_offset`` /
        ``char_offset`` say where in it the window starts."""
        table = pd.read_parquet(self.verified(run_files.SENTENCES))
        for column, default in SENTENCE_DEFAULTS.items():
            if column not in table.columns:
                table.insert(SENTENCE_COLUMNS.index(column), column, np.int64(default))
        return table

    def sentence_tokens(self, sentence: int) -> slice:
        """The token rows of ``sentence`` (for indexing ``queries``, ``keys`` and ``tokens``)."""
        if not 0 <= sentence < self.n_sentences:
            raise QkvizError(f"sentence {sentence} is out of range 0-{self.n_sentences - 1}")
        row = self.sentences.iloc[sentence]
        return slice(int(row.first_token), int(row.first_token + row.n_tokens))

    # -- images ---------------------------------------------------------------------------------
    @property
    def is_image_run(self) -> bool:
        """Whether the run's sequences are images (see :mod:`qkviz.extraction.writing.image_tokens`): its "sentences"
        are images, its tokens special tokens and patches with ``patch_row`` / ``patch_col``."""
        return self.image_input is not None

    @property
    def image_input(self) -> dict | None:
        """An image run's layout: ``prefix_tokens``, ``grid`` ``[rows, cols]``, ``patch_size``, ``image_size``,
        ``thumbnail`` (pixels a side of a patch thumbnail); ``None`` for a text run."""
        layout = self.manifest.get("input")
        return layout if layout and layout.get("modality") == "image" else None

    def patch_thumbnails(self) -> np.ndarray:
        """``[token, t, t, 3]`` uint8 (memory-mapped): every token's patch as the model saw it, un-normalised
        (zeros for special tokens); an image run's only."""
        if not self.is_image_run:
            raise QkvizError(f"{self.path} is a text run; patch thumbnails belong to image runs")
        return np.load(self.verified(run_files.PATCHES), mmap_mode="r")

    # -- vectors ------------------------------------------------------------------------------
    @cached_property
    def _arrays(self) -> dict[str, np.ndarray]:
        return {name: np.load(self.verified(name), mmap_mode="r") for name in run_files.ARRAY_FILES}

    def queries(self, layer: int, head: int) -> np.ndarray:
        """``[token, d_head]`` float32: the head's queries as they enter ``q . k``."""
        self.check_head(layer, head)
        return self._decode(run_files.QUERIES, run_files.QUERY_OFFSETS, layer, head)

    def keys(self, layer: int, head: int) -> np.ndarray:
        """``[token, d_head]`` float32: the keys of the key-value head serving query head ``head``."""
        self.check_head(layer, head)
        return self._decode(run_files.KEYS, run_files.KEY_OFFSETS, layer, self.kv_head(head))

    def value_norms(self, layer: int, head: int) -> np.ndarray:
        """``[token]`` float32: the norm of each token's value vector for this head."""
        self.check_head(layer, head)
        return np.asarray(self._arrays[run_files.VALUE_NORMS][layer, self.kv_head(head)], dtype=np.float32)

    def vector_rows(self, side: str, layer: int, head: int, rows: slice | np.ndarray) -> np.ndarray:
        """float32 ``[len(rows), d_head]``: only ``rows`` (token numbers) of the head's ``"queries"`` or
        ``"keys"`` (as :meth:`queries` / :meth:`keys` give them), decoded from the memory-mapped arrays --
        what a search reads block by block without holding a head's whole array."""
        self.check_head(layer, head)
        if side == "queries":
            return self._decode(run_files.QUERIES, run_files.QUERY_OFFSETS, layer, head, rows)
        if side == "keys":
            return self._decode(run_files.KEYS, run_files.KEY_OFFSETS, layer, self.kv_head(head), rows)
        raise ValueError(f"side must be 'queries' or 'keys', got {side!r}")

    def _decode(self, vectors: str, offsets: str, layer: int, head: int, rows: slice | np.ndarray = slice(None)) -> np.ndarray:
        """Stored vectors (of token ``rows``) plus their offsets, as a plain float32 array (see :mod:`qkviz.store.files`)."""
        head_offsets = self._arrays[offsets][layer, head]
        if len(head_offsets) == 1:
            return np.add(self._arrays[vectors][layer, head, rows], head_offsets[0], dtype=np.float32).view(np.ndarray)
        positions = np.minimum(self.tokens.position.to_numpy()[rows], len(head_offsets) - 1)
        return np.add(self._arrays[vectors][layer, head, rows], head_offsets[positions], dtype=np.float32)

    def kv_head(self, head: int) -> int:
        """The key-value head that serves query head ``head`` (equal to ``head`` without grouping)."""
        return head // (self.n_heads // self.n_kv_heads)

    # -- logit parts (optional files) ---------------------------------------------------------
    def has_part(self, name: str) -> bool:
        """Whether the run holds the optional file ``name`` (see ``run_files.LOGIT_PART_FILES``)."""
        return name in self.manifest["files"]

    def part(self, name: str) -> np.ndarray | None:
        """The optional array file ``name`` (memory-mapped), or ``None`` when the run lacks it."""
        return np.load(self.verified(name), mmap_mode="r") if self.has_part(name) else None

    def query_bias(self, layer: int, head: int) -> np.ndarray | None:
        """``[d_head]`` float32: the bias the model adds to this head's queries, or ``None``."""
        self.check_head(layer, head)
        bias = self.part(run_files.QUERY_BIAS)
        return None if bias is None else np.array(bias[layer, head])

    def key_bias(self, layer: int, head: int) -> np.ndarray | None:
        """``[d_head]`` float32: the bias of the keys serving query head ``head``, or ``None``."""
        self.check_head(layer, head)
        bias = self.part(run_files.KEY_BIAS)
        return None if bias is None else np.array(bias[layer, self.kv_head(head)])

    def rotary(self, layer: int) -> tuple[np.ndarray, np.ndarray] | None:
        """``(cos, sin)`` ``[position, rotary_dim]`` the layer rotates queries and keys with, or ``None``."""
        self.check_layer(layer)
        cos, sin = self.part(run_files.ROTARY_COS), self.part(run_files.ROTARY_SIN)
        return None if cos is None or sin is None else (np.array(cos[layer]), np.array(sin[layer]))

    # -- what a head moves (optional file) --------------------------------------------------------
    @property
    def has_output_norms(self) -> bool:
        """Whether the run keeps every head's ``|W_O^h v_j|`` (:meth:`output_norms`)."""
        return self.has_part(run_files.OUTPUT_NORMS)

    @property
    def no_output_norms(self) -> str | None:
        """Why the run keeps no output norms (one line saying what to do), or None where it keeps them."""
        if self.has_output_norms:
            return None
        recorded = self.manifest.get("output_norms")
        if isinstance(recorded, dict) and recorded.get("why"):
            return f"{self.path} has no output norms |W_O v|: {recorded['why']}"
        return (f"{self.path} has no output norms |W_O v| (extracted by a qkviz before they were kept); extract it "
                f"again with {option('overwrite')} to keep them")

    def output_norms(self, layer: int, head: int) -> np.ndarray:
        """``[token]`` float32: ``|W_O^h v_j|``, each token's value vector (of the key-value head serving ``head``)
        after query head ``head``'s slice of the attention's output projection -- the length of what the token
        would write into the residual stream through this head at attention weight 1 (output bias and any norm
        after the projection left out). A run without them (:attr:`no_output_norms`) raises a QkvizError."""
        self.check_head(layer, head)
        if not self.has_output_norms:
            raise QkvizError(self.no_output_norms)
        return np.array(self.part(run_files.OUTPUT_NORMS)[layer, head], dtype=np.float32)

    def head_updates(self, layer: int, head: int) -> np.ndarray | None:
        """``[token, 2]`` float32: the head's update norm over the hidden state's, and their cosine;
        ``None`` unless the run was extracted with ``--head-update``."""
        self.check_head(layer, head)
        updates = self.part(run_files.HEAD_UPDATES)
        return None if updates is None else np.array(updates[layer, head])

    # -- attention settings -------------------------------------------------------------------
    def scale(self, layer: int) -> float:
        """The factor layer ``layer`` multiplies ``q . k`` by before the softmax."""
        self.check_layer(layer)
        return float(self.manifest["attention"]["scales"][layer])

    def sliding_window(self, layer: int) -> int | None:
        self.check_layer(layer)
        return self.manifest["attention"]["sliding_windows"][layer]

    def softcap(self, layer: int) -> float | None:
        self.check_layer(layer)
        return self.manifest["attention"]["softcaps"][layer]

    def chunk(self, layer: int) -> int | None:
        """The tokens of one attention chunk on layer ``layer`` (Llama 4's chunked layers), or None."""
        self.check_layer(layer)
        return self._layer_term("chunks", layer)

    def alibi_slope(self, layer: int, head: int) -> float | None:
        """The ALiBi slope of head ``(layer, head)`` (BLOOM, MPT, Falcon with ALiBi), or None."""
        self.check_head(layer, head)
        slopes = self._layer_term("alibi_slopes", layer)
        return None if slopes is None else float(slopes[head])

    def sink(self, layer: int, head: int) -> float | None:
        """The sink logit of head ``(layer, head)`` (gpt-oss), or None."""
        self.check_head(layer, head)
        sinks = self._layer_term("sinks", layer)
        return None if sinks is None else float(sinks[head])

    def _layer_term(self, name: str, layer: int):
        """Layer ``layer``'s entry of the manifest's optional ``attention[name]``: None where the run has no such
        term (a run written before the term was stored, or by a model without it)."""
        values = self.manifest["attention"].get(name)
        return None if values is None else values[layer]

    def logit_rule(self, layer: int, head: int) -> LogitRule:
        """Everything head ``(layer, head)`` adds to ``q . k`` on its way to the softmax, as the model applied it
        (what every recomputation of its attention uses)."""
        return LogitRule(
            scale=self.scale(layer), causal=self.is_causal, window=self.sliding_window(layer), chunk=self.chunk(layer),
            softcap=self.softcap(layer), alibi_slope=self.alibi_slope(layer, head), sink=self.sink(layer, head))

    def attention(self, layer: int, head: int, sentence: int, weighting: str = "attention") -> np.ndarray:
        """``[query, key]`` float64 attention of one head over one sentence, recomputed from the vectors.

        Parameters
        ----------
        layer, head
            The head.
        sentence
            The sentence (a row of :attr:`sentences`).
        weighting
            ``"attention"``: the weights ``a_ij``. ``"value"``: ``a_ij * |W_O^h v_j|`` (:meth:`output_norms`), what
            each key moves into the query's residual stream through the head; rows are not renormalised (a row
            sums to the head's output length bound, not 1). A run without output norms raises a QkvizError.

        Returns
        -------
        numpy.ndarray
            ``[query, key]`` over the sentence's tokens; zero where the mask forbids the pair.
        """
        if weighting not in WEIGHTINGS:
            raise QkvizError(f"weighting={weighting!r} is not one of {', '.join(map(repr, WEIGHTINGS))}")
        rows = self.sentence_tokens(sentence)
        weights = attention.attention_probs(self.queries(layer, head)[rows], self.keys(layer, head)[rows],
                                            self.logit_rule(layer, head))
        if weighting == "value":
            weights = weights * self.output_norms(layer, head)[rows][None, :]
        return weights

    def result_marker(self, result: str) -> Path:
        """The file written last of a derived result (``"atlas"``, ``"related"``, ``"correlations"``):
        it exists once the result is complete, and its modification time changes when it is made again."""
        return self.path / run_files.RESULT_MARKERS[result]

    def check_layer(self, layer: int) -> None:
        if not 0 <= layer < self.n_layers:
            raise QkvizError(f"layer {layer} is out of range 0-{self.n_layers - 1}")

    def check_head(self, layer: int, head: int) -> None:
        self.check_layer(layer)
        if not 0 <= head < self.n_heads:
            raise QkvizError(f"head {head} is out of range 0-{self.n_heads - 1}")
