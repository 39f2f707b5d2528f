"""What heads do, measured over the whole corpus: the distance-dot-product correlation of every head,
the head atlas (statistics, pattern labels, logit decomposition, syntax), related heads, and how much
each head's attention changed between two runs over the same tokens; for the app, a head's attention with
tokens hidden or weighted by value norm (one sentence's, and the corpus average by position), one head's attention
over a long document (its map pooled to pixels and its profile, computed block by block), and how many clusters a
search's matches form in each head's layout; the text around a pair of tokens in a long document.
"""

from qkviz.analysis.statistics.attention_weighting import (AGGREGATE_POSITIONS, adjusted_attention, aggregate_attention,
                                               hidden_tokens, moved_norms)
from qkviz.analysis.atlas.attention_change import (attention_change, check_comparable, most_changed, shape_difference,
                                            token_difference)
from qkviz.analysis.documents.document_attention import (DocumentHead, HeadProfile, PooledMap, RepeatedSpan, attention_blocks,
                                               document_head, document_overview, head_profile, pixel_edges,
                                               pooled_attention, repeated_span)
from qkviz.analysis.statistics.correlation import COLUMNS as CORRELATION_COLUMNS
from qkviz.analysis.statistics.correlation import attending_pairs, correlation_table, head_correlation_rows, stored_correlations
from qkviz.analysis.statistics.syntax import TokenSyntax, load_pipeline
from qkviz.analysis.atlas.head_atlas import UPDATE_STATISTICS, HeadAtlas, compute_corpus_stats, load_atlas
from qkviz.analysis.labels.registry import LABELS, LabelThresholds
from qkviz.analysis.atlas.head_similarity import HeadSimilarity, RelatedHead, load_head_similarity, related_heads, relate_heads
from qkviz.analysis.statistics.head_stats import IMAGE_STATISTICS, STATISTICS
from qkviz.analysis.statistics.value_shares import VALUE_STATISTICS
from qkviz.analysis.statistics.induction_scores import copying_scores
from qkviz.analysis.atlas.match_clusters import CLUSTER_GRID, cluster_counts
from qkviz.analysis.documents.text_excerpt import excerpt, excerpt_pieces

__all__ = ["copying_scores", "AGGREGATE_POSITIONS", "CLUSTER_GRID", "CORRELATION_COLUMNS", "IMAGE_STATISTICS", "LABELS", "STATISTICS",
           "UPDATE_STATISTICS", "VALUE_STATISTICS", "DocumentHead", "HeadAtlas", "HeadProfile", "HeadSimilarity", "LabelThresholds",
           "PooledMap", "RelatedHead", "RepeatedSpan", "adjusted_attention", "aggregate_attention",
           "attention_blocks", "attention_change", "check_comparable", "cluster_counts", "compute_corpus_stats",
           "correlation_table", "document_head", "document_overview", "excerpt", "excerpt_pieces", "head_profile",
           "hidden_tokens", "load_atlas", "load_head_similarity", "moved_norms", "most_changed", "pixel_edges", "pooled_attention",
           "relate_heads", "related_heads", "repeated_span", "shape_difference", "stored_correlations",
           "token_difference",
           "TokenSyntax", "attending_pairs", "head_correlation_rows", "load_pipeline"]
