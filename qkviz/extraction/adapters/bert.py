"""BERT and RoBERTa: bidirectional encoders with query/key biases and absolute positions."""

from qkviz.extraction.adapters.base import EmbeddingPaths, FamilyAdapter

#: BERT and RoBERTa normalise the sum of token, position and token-type embeddings in ``embeddings.LayerNorm``.
EMBEDDINGS = EmbeddingPaths("embeddings.word_embeddings", "embeddings.position_embeddings",
                            "embeddings.token_type_embeddings", "embeddings.LayerNorm")


def _relative_positions(config) -> str | None:
    kind = getattr(config, "position_embedding_type", "absolute") or "absolute"
    if kind != "absolute":
        return (f"position_embedding_type={kind!r} adds relative-position terms to the attention logit; "
                "only 'absolute' can be reproduced from queries and keys")
    return None


BERT = FamilyAdapter(
    family="bert",
    model_types=("bert",),
    architectures=("BertModel", "BertForMaskedLM", "BertForPreTraining", "BertForSequenceClassification"),
    layers_path="encoder.layer",
    attention_path="attention.self",
    causal=False,
    output_projection_path="attention.output.dense",
    query_projection_path="query",
    key_projection_path="key",
    embeddings=EMBEDDINGS,
    description="BERT encoders (e.g. all-MiniLM-L6-v2, bert-base-uncased)",
    unsupported_reason=_relative_positions,
)

ROBERTA = FamilyAdapter(
    family="roberta",
    model_types=("roberta", "xlm-roberta"),
    architectures=("RobertaModel", "RobertaForMaskedLM", "XLMRobertaModel", "XLMRobertaForMaskedLM"),
    layers_path="encoder.layer",
    attention_path="attention.self",
    causal=False,
    output_projection_path="attention.output.dense",
    query_projection_path="query",
    key_projection_path="key",
    embeddings=EMBEDDINGS,
    description="RoBERTa encoders (positions offset by the padding index)",
    reserved_positions=lambda config: int(getattr(config, "pad_token_id", 1) or 0) + 1,
    unsupported_reason=_relative_positions,
)
