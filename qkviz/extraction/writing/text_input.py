"""A text corpus as a run's input: what :func:`qkviz.extraction.writing.pipeline.write_run` needs of it.

The sentences are tokenised and selected (:func:`qkviz.extraction.inputs.selection.select_sentences`), captured
by the text forward loop (:mod:`qkviz.extraction.streaming.text_capture`), and tabled one row per token and one per
sentence (:mod:`qkviz.extraction.writing.token_table`); the logit parts include the rotary tables and the
first layer's embedding parts of the tokens used.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from qkviz.core.errors import QkvizError
from qkviz.core.option_names import option
from qkviz.extraction.adapters import FamilyAdapter, ModelShape
from qkviz.extraction.models.borrowed_model import check_token_ids
from qkviz.extraction.capture.recorder import LayerAttentionSettings
from qkviz.extraction.streaming.chunk_capture import attention_layers
from qkviz.extraction.inputs.corpus import Corpus
from qkviz.extraction.gate.exactness_gate import GATE_SENTENCES, GATE_TOKENS, GateResult, check_exactness
from qkviz.extraction.inputs.long_documents import DocumentRule, default_overlap, refused_past, windows_of
from qkviz.extraction.streaming.logit_parts_capture import capture_logit_parts
from qkviz.extraction.models.loading import LoadedModel
from qkviz.extraction.inputs.selection import TokenizedSentence, select_sentences
from qkviz.extraction.streaming.text_capture import capture_sentences, pad_token_id, padded_batch
from qkviz.extraction.writing.token_table import sentence_table, token_table
from qkviz.store.run import StoredRun
from qkviz.store.run_writer import RunWriter


@dataclass
class TextInput:
    """The selected sentences of a text corpus, for one model."""

    loaded: LoadedModel
    adapter: FamilyAdapter
    shape: ModelShape
    corpus_data: Corpus
    sentences: list[TokenizedSentence]
    selection: dict          # the identity's "selection": how the sentences were chosen

    @classmethod
    def select(cls, loaded: LoadedModel, adapter: FamilyAdapter, corpus_data: Corpus, *, max_tokens: int | None,
               max_sentences: int | None, seed: int, max_length: int | None, chunk: int | None = None,
               chunk_overlap: int | None = None) -> "TextInput":
        """The sentences of ``corpus_data`` the run holds (see :func:`select_sentences`): each truncated to
        ``max_length`` tokens, or split into windows of ``chunk`` tokens sharing ``chunk_overlap``
        (:mod:`qkviz.extraction.inputs.long_documents`); without either, a document longer than the model's context
        is refused with its count. None fitting, or a tokenizer of another model, is refused."""
        config = loaded.model.config
        context = adapter.max_tokens_per_sequence(config)
        length_limit = _length_limit(context, max_length)
        _check_room_for_text(loaded.tokenizer, length_limit)
        rule, windows = refused_past(context, adapter.sequence_limit_name(config)), {}
        if chunk is not None:
            overlap = default_overlap(chunk) if chunk_overlap is None else chunk_overlap
            rule = _window_rule(loaded.tokenizer, context, chunk, overlap)
            windows = {"chunk": chunk, "chunk_overlap": overlap}
        sentences = select_sentences(corpus_data.sentences, loaded.tokenizer, max_length, max_tokens,
                                     max_sentences, seed, rule)
        if not sentences:
            raise QkvizError(f"no sentence of {corpus_data.source} fits in {option('max_tokens', max_tokens)}; "
                             "raise it")
        check_token_ids(sentences, loaded.model)
        selection = {"max_tokens": max_tokens, "max_sentences": max_sentences, "seed": seed,
                     "max_length": length_limit, **windows}
        return cls(loaded, adapter, adapter.shape(config), corpus_data, sentences, selection)

    @property
    def corpus(self) -> dict:
        """What of the corpus the run's numbers depend on (the identity's ``corpus``)."""
        return {"sha256": self.corpus_data.sha256, "text_column": self.corpus_data.text_column}

    @property
    def source(self) -> str:
        return self.corpus_data.source

    @property
    def n_corpus_items(self) -> int:
        return len(self.corpus_data.sentences)

    @property
    def n_sequences(self) -> int:
        return len(self.sentences)

    @property
    def n_tokens(self) -> int:
        return sum(len(s) for s in self.sentences)

    @property
    def n_truncated(self) -> int:
        return sum(s.truncated for s in self.sentences)

    def check_exactness(self) -> GateResult:
        """The exactness gate (:mod:`qkviz.extraction.gate.exactness_gate`) on the first sentences, cut short, and on the
        longest, cut past the model's window where it has one."""
        model = self.loaded.model
        inputs, lengths = self.gate_batch()
        return check_exactness(model, self.adapter, self.shape, attention_layers(model, self.adapter, self.shape),
                               inputs, lengths, expected_causal=self.adapter.causal,
                               longest=list(max(self.sentences, key=len).token_ids))

    def gate_batch(self) -> tuple[dict, list[int]]:
        """The gate's first batch: the first :data:`GATE_SENTENCES` sentences cut to :data:`GATE_TOKENS` tokens,
        right-padded (the model's inputs), and their lengths."""
        batch = [replace(s, token_ids=s.token_ids[:GATE_TOKENS]) for s in self.sentences[:GATE_SENTENCES]]
        input_ids, attention_mask = padded_batch(batch, pad_token_id(self.loaded.tokenizer),
                                                 str(next(self.loaded.model.parameters()).device))
        return {"input_ids": input_ids, "attention_mask": attention_mask}, [len(s) for s in batch]

    def capture(self, writer: RunWriter, batch_size: int, progress: bool) -> dict[int, LayerAttentionSettings]:
        """Capture the sentences not yet on disk; each layer's attention settings."""
        settings = capture_sentences(self.loaded, self.adapter, self.shape, self.sentences, writer, batch_size,
                                     progress)
        if any(settings[layer].causal != self.adapter.causal for layer in settings):
            raise RuntimeError(f"{self.adapter.family} layers disagree with the family's causality")
        return settings

    def token_table(self) -> pd.DataFrame:
        return token_table(self.sentences, self.loaded.tokenizer)

    def sequence_table(self) -> pd.DataFrame:
        return sentence_table(self.sentences)

    def manifest_input(self) -> dict | None:
        """A text run's manifest has no ``input``."""
        return None

    def logit_parts(self) -> dict[str, np.ndarray]:
        """``{run file: array}``: the biases, rotary tables and the first layer's embedding parts of the tokens
        used."""
        model = self.loaded.model
        used = np.unique(np.concatenate([np.asarray(s.token_ids, dtype=np.int64) for s in self.sentences]))
        return capture_logit_parts(model, self.adapter, self.shape, max(len(s) for s in self.sentences),
                                   pad_token_id(self.loaded.tokenizer), str(next(model.parameters()).device),
                                   used_token_ids=used)

    def extra_arrays(self) -> dict[str, np.ndarray]:
        """A text run has no array but the vectors and the logit parts."""
        return {}

    def summary(self, run: StoredRun) -> str:
        """What was extracted, for the log line."""
        return (f"{run.n_sentences} sentences, {run.n_tokens} tokens, {run.n_layers} layers x {run.n_heads} heads "
                f"({run.n_kv_heads} key-value heads)")


def _length_limit(model_limit: int | None, requested: int | None) -> int | None:
    if requested is not None and model_limit is not None and requested > model_limit:
        raise QkvizError(f"{option('max_length', requested)} is longer than the model allows ({model_limit})")
    return requested if requested is not None else model_limit


def _window_rule(tokenizer, context: int | None, size: int, overlap: int) -> DocumentRule:
    """Windows of ``size`` tokens sharing ``overlap``, once ``size`` is checked against the model and the tokenizer."""
    if context is not None and size > context:
        raise QkvizError(f"{option('chunk', size)} is longer than the model's context ({context}); use at most {context}")
    special = tokenizer.num_special_tokens_to_add(pair=False)
    if size - special <= overlap:
        raise QkvizError(f"{option('chunk', size)} holds {size - special} text tokens after the tokenizer's {special} "
                         f"special tokens, not more than {option('chunk_overlap', overlap)}: raise "
                         f"{option('chunk', None)} or lower {option('chunk_overlap', None)}")
    return windows_of(size, overlap)


def _check_room_for_text(tokenizer, length_limit: int | None) -> None:
    """A ``--max-length`` that leaves no token for text after the model's special tokens is refused (a
    tokenizer cannot truncate below them, and would silently ignore the limit)."""
    special = tokenizer.num_special_tokens_to_add(pair=False)
    if length_limit is not None and length_limit <= special:
        raise QkvizError(f"{option('max_length', length_limit)} leaves no room for text: the tokenizer adds {special} "
                         f"special tokens to every sentence; use at least {special + 1}")
