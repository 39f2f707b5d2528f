"""DistilBERT: a six-layer BERT whose attention module holds ``q_lin`` / ``k_lin`` itself."""

from qkviz.extraction.adapters.base import EmbeddingPaths, FamilyAdapter

DISTILBERT = FamilyAdapter(
    family="distilbert",
    model_types=("distilbert",),
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
