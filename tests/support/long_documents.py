"""A tiny decoder with a long context over long documents, for the document view's tests: the tiny Llama's
shape (2 layers x 4 heads over 2 key-value heads) with a context of 4,096 tokens, and documents of a few
thousand tokens made of the project corpus's sentences, the first repeating a passage (for the induction score)."""

from __future__ import annotations

from pathlib import Path

import torch
import transformers

from support.tiny_models import HEADS, HIDDEN, INIT_RANGE, KV_HEADS, LAYERS, VOCAB_SIZE, decoder_tokenizer

CONTEXT = 4096


def build_long_model(directory: Path, sentences: list[str], seed: int = 0) -> Path:
    """Save the tiny long-context Llama and its tokenizer in ``directory``."""
    tokenizer = decoder_tokenizer(sentences)
    config = transformers.LlamaConfig(vocab_size=VOCAB_SIZE, initializer_range=INIT_RANGE * 4,
                                      pad_token_id=tokenizer.pad_token_id, hidden_size=HIDDEN,
                                      intermediate_size=2 * HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                      num_key_value_heads=KV_HEADS, head_dim=HIDDEN // HEADS,
                                      max_position_embeddings=CONTEXT)
    torch.manual_seed(seed)
    transformers.AutoModel.from_config(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def write_documents(path: Path, sentences: list[str], words: int = 600) -> Path:
    """Two documents, one a line: about ``words`` words of the corpus followed by their first half again, and a
    short one."""
    chosen, count = [], 0
    for sentence in sentences:
        chosen.append(sentence)
        count += len(sentence.split())
        if count >= words:
            break
    passage = " ".join(chosen)
    path.write_text(f"{passage} {' '.join(chosen[:len(chosen) // 2])}\n{sentences[-1]}\n", encoding="utf-8")
    return path


def long_document_run(directory: Path, sentences: list[str]):
    """The tiny long-context model's run over :func:`write_documents` (made in ``directory``)."""
    import qkviz

    model = build_long_model(directory / "model", sentences)
    corpus = write_documents(directory / "documents.txt", sentences)
    return qkviz.extract(str(model), corpus, directory / "run", progress=False)
