"""Tiny randomly initialised models of every supported family, built from configs (no downloads).

Tokenizers are trained on the project's corpus with the ``tokenizers`` library: a WordPiece
encoder tokenizer that adds [CLS] / [SEP], and a byte-level BPE decoder tokenizer that adds a BOS
token. Weights are drawn with a large ``initializer_range`` so that attention is far from uniform
and an error in the captured vectors shows.
"""

from __future__ import annotations

from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

VOCAB_SIZE = 400
HIDDEN = 64
HEADS = 4
KV_HEADS = 2
LAYERS = 2
INIT_RANGE = 0.12
QUERY_KEY_PROJECTIONS = ("query", "key", "q_proj", "k_proj", "q_lin", "k_lin", "c_attn")

ENCODER_FAMILIES = ("bert", "roberta", "distilbert")
DECODER_FAMILIES = ("gpt2", "llama", "qwen2", "mistral", "gemma3")
FAMILIES = ENCODER_FAMILIES + DECODER_FAMILIES


def encoder_tokenizer(sentences: list[str]) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]"]
    tokenizer.train_from_iterator(sentences, trainers.WordPieceTrainer(vocab_size=VOCAB_SIZE, special_tokens=specials))
    cls, sep = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tokenizer.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]",
                                   cls_token="[CLS]", sep_token="[SEP]")


def decoder_tokenizer(sentences: list[str]) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    specials = ["<pad>", "<bos>", "<eos>"]
    tokenizer.train_from_iterator(sentences, trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    bos = tokenizer.token_to_id("<bos>")
    tokenizer.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=True),
        processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", bos)]),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<bos>",
                                   eos_token="<eos>")


#: every tiny model's context: longer than every sentence of data/sentences.txt for the tiny tokenizers (at most
#: 175 tokens), so that no test extraction needs --max-length or --chunk unless it says so
CONTEXT = 256


def tiny_config(family: str, pad_token_id: int):
    common = dict(vocab_size=VOCAB_SIZE, initializer_range=INIT_RANGE, pad_token_id=pad_token_id)
    rotary = dict(common, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN, num_hidden_layers=LAYERS,
                  num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, head_dim=HIDDEN // HEADS,
                  max_position_embeddings=CONTEXT)
    if family == "bert":
        return transformers.BertConfig(**common, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                                       num_attention_heads=HEADS, intermediate_size=2 * HIDDEN,
                                       max_position_embeddings=CONTEXT)
    if family == "roberta":
        return transformers.RobertaConfig(**common, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                                          num_attention_heads=HEADS, intermediate_size=2 * HIDDEN,
                                          max_position_embeddings=CONTEXT + pad_token_id + 1)
    if family == "distilbert":
        return transformers.DistilBertConfig(**common, dim=HIDDEN, n_layers=LAYERS, n_heads=HEADS,
                                             hidden_dim=2 * HIDDEN, max_position_embeddings=CONTEXT)
    if family == "gpt2":
        # Layer-dependent scaling: the recorded scale must differ per layer.
        return transformers.GPT2Config(**common, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS, n_positions=CONTEXT,
                                       scale_attn_by_inverse_layer_idx=True)
    if family == "llama":
        return transformers.LlamaConfig(**rotary)
    if family == "qwen2":
        return transformers.Qwen2Config(**rotary)
    if family == "mistral":
        # A window shorter than most sentences, so the sliding-window mask matters.
        return transformers.MistralConfig(**rotary, sliding_window=6)
    if family == "gemma3":
        return transformers.Gemma3TextConfig(
            **dict(rotary, num_hidden_layers=3), sliding_window=5, query_pre_attn_scalar=24,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"])
    raise ValueError(family)


def build_tiny_model(family: str, directory: Path, sentences: list[str], seed: int = 0) -> Path:
    """Save a tiny ``family`` model with its tokenizer in ``directory`` and return it."""
    tokenizer = encoder_tokenizer(sentences) if family in ENCODER_FAMILIES else decoder_tokenizer(sentences)
    torch.manual_seed(seed)
    model = transformers.AutoModel.from_config(tiny_config(family, tokenizer.pad_token_id))
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if family == "gemma3" and ("q_norm" in name or "k_norm" in name):
                # Gemma's norms start at zero offset; give QK-norm weights some spread so they matter.
                parameter.normal_(0.0, 0.5)
            if name.endswith("bias") and any(part in name for part in QUERY_KEY_PROJECTIONS):
                # Biases start at zero; non-zero ones make them matter to the logit (and its decomposition).
                parameter.normal_(0.0, 4 * INIT_RANGE)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def perturbed_model(source: Path, directory: Path, seed: int, scale: float = 0.5) -> Path:
    """The model of ``source`` with seeded Gaussian noise of ``scale`` times each weight's spread added to
    every weight, saved with ``source``'s tokenizer in ``directory`` (another checkpoint of the same model)."""
    model = transformers.AutoModel.from_pretrained(source)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            spread = parameter.std() if parameter.numel() > 1 else parameter.abs().mean()
            parameter.add_(torch.randn(parameter.shape, generator=generator) * scale * float(spread))
    model.save_pretrained(directory)
    transformers.AutoTokenizer.from_pretrained(source).save_pretrained(directory)
    return directory
