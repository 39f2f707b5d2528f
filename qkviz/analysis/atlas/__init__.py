"""The head atlas of a run: every head's statistics, labels, relative-position profile and exemplars, computed as
one pure task per head; related heads (how alike every pair is); how much each head's attention changed between two
runs; and how many clusters a search's matches form in each head's layout."""

from qkviz.analysis.atlas.attention_change import (attention_change, check_comparable, most_changed, shape_difference,
                                                   token_difference)
from qkviz.analysis.atlas.head_atlas import (UPDATE_BINS, UPDATE_RATIO_RANGE, UPDATE_STATISTICS, HeadAtlas,
                                             compute_corpus_stats, load_atlas, store_atlas)
from qkviz.analysis.atlas.head_similarity import (HeadSimilarity, RelatedHead, load_head_similarity, relate_heads,
                                                  related_heads)
from qkviz.analysis.atlas.match_clusters import CLUSTER_GRID, cluster_counts

__all__ = ["CLUSTER_GRID", "UPDATE_BINS", "UPDATE_RATIO_RANGE", "UPDATE_STATISTICS", "HeadAtlas", "HeadSimilarity",
           "RelatedHead", "attention_change", "check_comparable", "cluster_counts", "compute_corpus_stats",
           "load_atlas", "load_head_similarity", "most_changed", "relate_heads", "related_heads", "shape_difference",
           "store_atlas", "token_difference"]
