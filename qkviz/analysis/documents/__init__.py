"""One long document: a head's attention over it recomputed block by block (its map pooled to pixels, its profile,
a repeated span), and the part of its text worth showing beside a pair of tokens."""

from qkviz.analysis.documents.document_attention import (DocumentHead, HeadProfile, PooledMap, RepeatedSpan,
                                                         attention_blocks, document_head, document_overview,
                                                         head_profile, pixel_edges, pooled_attention, repeated_span)
from qkviz.analysis.documents.text_excerpt import excerpt, excerpt_pieces

__all__ = ["DocumentHead", "HeadProfile", "PooledMap", "RepeatedSpan", "attention_blocks", "document_head",
           "document_overview", "excerpt", "excerpt_pieces", "head_profile", "pixel_edges", "pooled_attention",
           "repeated_span"]
