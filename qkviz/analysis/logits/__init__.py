"""A head's attention logit split into exact parts: by query and key terms over the corpus (the logit decomposition
of Transformer-XL Fig. 7), and one logit by query part x key part, by one side's parts, or by dimension."""

from qkviz.analysis.logits.logit_attribution import BY, dimension_split, pair_split, side_split
from qkviz.analysis.logits.logit_decomposition import (EMBEDDING_TERMS, EmbeddingSplit, available_terms,
                                                       decompose_embeddings, decompose_head, forget_blocks)

__all__ = ["BY", "EMBEDDING_TERMS", "EmbeddingSplit", "available_terms", "decompose_embeddings", "decompose_head",
           "dimension_split", "forget_blocks", "pair_split", "side_split"]
