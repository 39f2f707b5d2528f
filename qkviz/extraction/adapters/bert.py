"""BERT and RoBERTa: bidirectional encoders with query/key biases and absolute positions."""

from qkviz.extraction.adapters.base import EmbeddingPaths, FamilyAdapter
from qkviz.extraction.adapters.refusals import relative_positions

#: BERT and RoBERTa normalise the sum of token, position and token-type embeddings in ``embeddings.LayerNorm``.
EMBEDDINGS = EmbeddingPaths("embeddings.word_embeddings", "embeddings.position_embeddings",
                            "embeddings.token_type_embeddings", "embeddings.LayerNorm")


def _encoder(family: str, model_types: tuple[str, ...], architectures: tuple[str, ...], description: str,
             reserved_positions=lambda config: 0) -> FamilyAdapter:
    """A BERT-layout encoder: ``encoder.layer[i].attention.self`` with ``query`` / ``key`` projections."""
    return FamilyAdapter(
        family=family,
        model_types=model_types,
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


BERT = _encoder("bert", ("bert",),
                ("BertModel", "BertForMaskedLM", "BertForPreTraining", "BertForSequenceClassification"),
                "BERT encoders (e.g. all-MiniLM-L6-v2, bert-base-uncased)")
ROBERTA = _encoder("roberta", ("roberta", "xlm-roberta"),
                   ("RobertaModel", "RobertaForMaskedLM", "XLMRobertaModel", "XLMRobertaForMaskedLM"),
                   "RoBERTa encoders (positions offset by the padding index)",
                   reserved_positions=lambda config: int(getattr(config, "pad_token_id", 1) or 0) + 1)
