"""The modern-scale test subject: a Llama-shaped decoder with a real model's head grid and context, random weights
and a tiny width, and documents of thousands of tokens (``bench.modern_scale`` and the views' tests use it).

    python -m bench.modern_model --out /tmp/qkviz-modern          # model/ and documents.txt
    python -m bench.modern_model --out DIR --layers 16 --heads 32 --kv-heads 8

* **The model** (``model/``): ``LlamaForCausalLM`` of ``--layers`` x ``--heads`` query heads over ``--kv-heads``
  key-value heads (grouped-query, as Llama-3-8B's 32 x 32 over 8), head size ``--head-dim`` (8: a tiny width;
  what is measured is the views and the per-head work, which grow with heads and tokens, not with the width),
  rotary positions, a context of ``--context`` tokens (8,192), weights drawn with a large initialiser range so
  that heads differ. Its tokenizer is a byte-level BPE of ``--vocab`` entries trained on ``data/classics.txt``
  (no download), adding a ``<bos>`` to each document.
* **The documents** (``documents.txt``, one a line): ``--documents`` consecutive passages of ``data/classics.txt``
  (public-domain books) of about ``--document-tokens`` tokens each; the last one repeats its first half, so
  that an induction head has a repeated passage to show.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLASSICS = ROOT / "data" / "classics.txt"


def train_tokenizer(lines: list[str], vocab: int):
    """A byte-level BPE tokenizer of ``vocab`` entries over ``lines``, adding ``<bos>`` in front of a text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.train_from_iterator(lines, trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=["<pad>", "<bos>", "<eos>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bos = tokenizer.token_to_id("<bos>")
    tokenizer.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=True),
        processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", bos)])])
    tokenizer.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<bos>",
                                   eos_token="<eos>")


def make_model(directory: Path, *, layers: int = 32, heads: int = 32, kv_heads: int = 8, head_dim: int = 8,
               context: int = 8192, vocab: int = 4096, seed: int = 0) -> Path:
    """Save the random Llama-shaped model and its tokenizer in ``directory`` (kept if already there)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    directory = Path(directory)
    if (directory / "config.json").exists():
        return directory
    lines = CLASSICS.read_text(encoding="utf-8").splitlines()
    tokenizer = train_tokenizer(lines, vocab)
    hidden = heads * head_dim
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
                         head_dim=head_dim, max_position_embeddings=context, initializer_range=0.4,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()
    partial = directory.with_name(directory.name + ".partial")
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    partial.rename(directory)
    return directory


def make_documents(path: Path, tokenizer, *, documents: int = 3, document_tokens: int = 3000) -> list[str]:
    """Write ``documents`` passages of about ``document_tokens`` tokens each to ``path``, one a line (the last
    repeating its first half); returns them."""
    lines = CLASSICS.read_text(encoding="utf-8").splitlines()
    made, start = [], 0
    for number in range(documents):
        words: list[str] = []
        budget = document_tokens // 2 if number == documents - 1 else document_tokens
        while start < len(lines) and len(tokenizer(" ".join(words))["input_ids"]) < budget:
            words.append(lines[start])
            start += 1
        text = " ".join(words)
        made.append(f"{text} {text}" if number == documents - 1 else text)
    path.write_text("\n".join(made) + "\n", encoding="utf-8")
    return made


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("/tmp/qkviz-modern"))
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=8)
    parser.add_argument("--context", type=int, default=8192)
    parser.add_argument("--documents", type=int, default=3)
    parser.add_argument("--document-tokens", type=int, default=3000)
    args = parser.parse_args()
    from transformers import AutoTokenizer

    args.out.mkdir(parents=True, exist_ok=True)
    model = make_model(args.out / "model", layers=args.layers, heads=args.heads, kv_heads=args.kv_heads,
                       head_dim=args.head_dim, context=args.context)
    tokenizer = AutoTokenizer.from_pretrained(model)
    texts = make_documents(args.out / "documents.txt", tokenizer, documents=args.documents,
                           document_tokens=args.document_tokens)
    print(json.dumps({"model": str(model), "documents": str(args.out / "documents.txt"),
                      "tokens": [len(tokenizer(text)["input_ids"]) for text in texts]}))


if __name__ == "__main__":
    main()
