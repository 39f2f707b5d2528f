"""The residual stream entering a layer, split into the parts that wrote it (embeddings, each earlier head and MLP,
the biases), each carried through every norm with its divisor fixed, and each part's query and key: what
:mod:`qkviz.explain` splits a logit by."""

from qkviz.extraction.residual.residual_parts import AttributionRefused, layer_weighted_sums, query_key_parts

__all__ = ["AttributionRefused", "layer_weighted_sums", "query_key_parts"]
