"""The encoders (bidirectional, absolute or relative positions) qkviz knows, one declaration per model type.

BERT-layout encoders (BERT, RoBERTa) and DistilBERT keep an adapter for what the logit decomposition needs (the
output projection outside the attention module, the embedding parts); the BERT-style families written before
transformers' attention interface are captured where their own code multiplies queries by keys; families whose
attention adds a term q.k cannot express, or is not softmax(q.k) over every key, are refused by name.
"""

from __future__ import annotations

from dataclasses import replace

from qkviz.extraction.families.adapter import EmbeddingPaths, FamilyAdapter
from qkviz.extraction.families.declaration import (BERT_SELF_ATTENTION, OwnCodeCapture, exact, head_size_scale,
                                                   refused, refused_term, relative_positions)

#: BERT and RoBERTa normalise the sum of token, position and token-type embeddings in ``embeddings.LayerNorm``.
EMBEDDINGS = EmbeddingPaths("embeddings.word_embeddings", "embeddings.position_embeddings",
                            "embeddings.token_type_embeddings", "embeddings.LayerNorm")


def _encoder(family: str, architectures: tuple[str, ...], description: str,
             reserved_positions=lambda config: 0) -> FamilyAdapter:
    """A BERT-layout encoder: ``encoder.layer[i].attention.self`` with ``query`` / ``key`` projections."""
    return FamilyAdapter(
        family=family,
        model_types=(),         # those of the declarations that name it (the catalogue)
        architectures=architectures,
        layers_path="encoder.layer",
        attention_path="attention.self",
        causal=False,
        output_projection_path="attention.output.dense",
        query_projection_path="query",
        key_projection_path="key",
        embeddings=EMBEDDINGS,
        description=description,
        reserved_positions=reserved_positions,
        unsupported_reason=relative_positions,
    )


BERT = _encoder("bert", ("BertModel", "BertForMaskedLM", "BertForPreTraining", "BertForSequenceClassification"),
                "BERT encoders (e.g. all-MiniLM-L6-v2, bert-base-uncased)")
ROBERTA = _encoder("roberta", ("RobertaModel", "RobertaForMaskedLM", "XLMRobertaModel", "XLMRobertaForMaskedLM"),
                   "RoBERTa encoders (positions offset by the padding index)",
                   reserved_positions=lambda config: int(getattr(config, "pad_token_id", 1) or 0) + 1)
#: DistilBERT: a six-layer BERT whose attention module holds ``q_lin`` / ``k_lin`` itself
DISTILBERT = FamilyAdapter(
    family="distilbert",
    model_types=(),
    architectures=("DistilBertModel", "DistilBertForMaskedLM"),
    layers_path="transformer.layer",
    attention_path="attention",
    causal=False,
    output_projection_path="attention.out_lin",
    query_projection_path="q_lin",
    key_projection_path="k_lin",
    embeddings=EmbeddingPaths("embeddings.word_embeddings", "embeddings.position_embeddings", None,
                              "embeddings.LayerNorm"),
    description="DistilBERT encoders",
)

DEBERTA = "DeBERTa adds disentangled relative-position terms (content-to-position, position-to-content) to every logit"

#: XLM and FlauBERT: attention modules in a list of their own (``attentions.0``), queries scaled before the product
_XLM_ATTENTION = OwnCodeCapture(heads=lambda module: module.n_heads, scaling=head_size_scale("head_dim"),
                                causal=lambda module, config: bool(getattr(config, "causal", False)), query_scaled=True)
_OWN_CODE = "BERT's self-attention in its own code (captured where it multiplies queries by keys)"

DECLARATIONS = (
    exact("bert", "query/key biases, absolute positions", adapter=BERT),
    exact("roberta", "positions offset by the padding index", adapter=ROBERTA),
    exact("xlm-roberta", "as RoBERTa", adapter=ROBERTA),
    exact("camembert", "as RoBERTa"),
    exact("distilbert", adapter=DISTILBERT),
    exact("electra", "embedding projection before the encoder",
          attribution_refused="its first layer's input is a projection of its embeddings, which the split does not carry"),
    exact("modernbert", "local (sliding-window, both sides) / global layers, rotary"),
    exact("albert", "one layer shared by every layer: captured once per call, the run's layer i is its i-th call",
          attribution_refused="its layers share one module; the split needs each layer's own"),
    refused_term("mpnet", "MPNet adds a learned relative-position bias to every attention logit"),
    refused_term("deberta", DEBERTA),
    refused_term("deberta-v2", DEBERTA),
    # attention computed by the family's own code, captured where it multiplies queries by keys
    exact("megatron-bert", _OWN_CODE, in_table=False,
          captures={"modeling_megatron_bert.MegatronBertSelfAttention": BERT_SELF_ATTENTION}),
    exact("rembert", _OWN_CODE, in_table=False, captures={"modeling_rembert.RemBertSelfAttention": BERT_SELF_ATTENTION}),
    exact("roformer", _OWN_CODE + "; rotary inside it", in_table=False,
          captures={"modeling_roformer.RoFormerSelfAttention": BERT_SELF_ATTENTION}),
    # q.k heads beside a span convolution over the unmasked hidden states (padding too): each sentence passes alone
    exact("convbert", _OWN_CODE + " beside a span convolution over the padding too: each sentence passes alone",
          in_table=False, captures={"modeling_convbert.ConvBertSelfAttention":
                                    replace(BERT_SELF_ATTENTION, reads_padding=True)}),
    exact("big_bird", _OWN_CODE + "; block-sparse: within the span where its own code attends in full", in_table=False,
          captures={"modeling_big_bird.BigBirdSelfAttention": BERT_SELF_ATTENTION}),
    exact("ibert", _OWN_CODE, in_table=False, captures={"modeling_ibert.IBertSelfAttention": BERT_SELF_ATTENTION}),
    exact("tapas", _OWN_CODE, in_table=False, captures={"modeling_tapas.TapasSelfAttention": BERT_SELF_ATTENTION}),
    exact("luke", _OWN_CODE, in_table=False, captures={"modeling_luke.LukeSelfAttention": BERT_SELF_ATTENTION}),
    exact("xlm", "attention modules in a list of their own, queries scaled before the product", in_table=False,
          captures={"modeling_xlm.MultiHeadAttention": _XLM_ATTENTION}),
    exact("flaubert", "as XLM", in_table=False, captures={"modeling_flaubert.MultiHeadAttention": _XLM_ATTENTION}),
    # attention computed by the family's own code in a form that is not softmax(scale * q.k) over every key
    refused("longformer", "Longformer attends within a sliding window plus global tokens, computed by its own code in "
                          "overlapping chunks: a mask qkviz does not store", in_table=False),
    refused("perceiver", "Perceiver attends from a fixed set of learned latent vectors to the tokens and among the "
                         "latents, never from a token to a token: no token has both a query and a key", in_table=False),
    refused("reformer", "Reformer attends within hashed (LSH) buckets or local chunks: a mask qkviz does not store",
            in_table=False),
    refused("nystromformer", "Nystromformer approximates softmax attention from landmark averages, not softmax(q.k)",
            in_table=False),
    refused("mra", "MRA approximates attention at several block resolutions, not softmax(q.k)", in_table=False),
    refused("yoso", "YOSO estimates attention by locality-sensitive hashing, not softmax(q.k)", in_table=False),
)
