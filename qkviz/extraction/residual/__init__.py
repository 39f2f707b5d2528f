"""The residual stream entering a layer, split into the parts that wrote it (embeddings, each earlier head and MLP,
the biases), each carried through every norm with its divisor fixed, and each part's query and key: what
:mod:`qkviz.explain` splits a logit by; and the final residual stream split the same way, through the final norm and
the unembedding, into each part's direct effect on a token's logit."""

from qkviz.extraction.residual.chunked_sums import sequence_weighted_sums
from qkviz.extraction.residual.final_stream import DirectEffects, direct_effect_parts
from qkviz.extraction.residual.head_writes import HeadWrites, head_write_parts, head_writes_at
from qkviz.extraction.residual.residual_parts import AttributionRefused, layer_weighted_sums, query_key_parts

__all__ = ["AttributionRefused", "DirectEffects", "HeadWrites", "direct_effect_parts", "head_write_parts",
           "head_writes_at", "layer_weighted_sums", "query_key_parts", "sequence_weighted_sums"]
