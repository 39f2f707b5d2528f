"""Per-head statistics over the whole corpus (numpy only): every atlas statistic declared once (``registry``), one
head's attention recomputed sentence batches at a time, the seed papers' statistics, value-weighted shares, syntax
alignment, induction and previous-token scores over repeated text, the distance-dot-product correlation, what a
uniform head would score, and attention as the app's views adjust it."""

from qkviz.analysis.statistics.attention_batches import (SentenceBatch, batch_attention, batch_mask, release_workspace,
                                                         sentence_batches, workspace)
from qkviz.analysis.statistics.attention_weighting import (AGGREGATE_POSITIONS, adjusted_attention, aggregate_attention,
                                                           hidden_tokens, moved_norms)
from qkviz.analysis.statistics.correlation import COLUMNS as CORRELATION_COLUMNS
from qkviz.analysis.statistics.correlation import (attending_pairs, correlation_table, head_correlation_rows,
                                                   stored_correlations)
from qkviz.analysis.statistics.head_stats import DEFAULT_MAX_OFFSET, IMAGE_STATISTICS, STATISTICS, head_statistics
from qkviz.analysis.statistics.induction_scores import REPEAT_STATISTICS, RepeatSums, RepeatTargets, copying_scores
from qkviz.analysis.statistics.token_kinds import TokenKinds
from qkviz.analysis.statistics.registry import (ATLAS_STATISTIC, ATLAS_STATISTICS, PANEL, STATISTIC_FAMILIES,
                                                AtlasStatistic, StatisticFamily, describe_statistic, is_share,
                                                statistic_names)
from qkviz.analysis.statistics.syntax import (POS_TAGS, SYNTAX_STATISTICS, BatchSyntax, TokenSyntax, batch_syntax,
                                              load_pipeline)
from qkviz.analysis.statistics.uniform_chance import UniformChance, uniform_chance
from qkviz.analysis.statistics.value_shares import VALUE_STATISTICS

__all__ = ["ATLAS_STATISTIC", "ATLAS_STATISTICS", "PANEL", "STATISTIC_FAMILIES", "AtlasStatistic", "StatisticFamily",
           "describe_statistic", "is_share", "statistic_names",
           "AGGREGATE_POSITIONS", "CORRELATION_COLUMNS", "DEFAULT_MAX_OFFSET", "IMAGE_STATISTICS", "POS_TAGS",
           "REPEAT_STATISTICS", "STATISTICS", "SYNTAX_STATISTICS", "VALUE_STATISTICS", "BatchSyntax", "RepeatSums",
           "RepeatTargets", "SentenceBatch", "TokenKinds", "TokenSyntax", "UniformChance", "adjusted_attention",
           "aggregate_attention", "attending_pairs", "batch_attention", "batch_mask", "batch_syntax", "copying_scores",
           "correlation_table", "head_correlation_rows", "head_statistics", "hidden_tokens", "load_pipeline",
           "moved_norms", "release_workspace", "sentence_batches", "stored_correlations", "uniform_chance",
           "workspace"]
