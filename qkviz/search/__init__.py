"""Corpus-wide search: every head's attention partners by maximum inner product (exact on the run's arrays,
or an inverted file past a size), the token
index of the global search (and an image run's image ids, searched like tokens), and how many partners a
layout keeps near.
"""

from qkviz.search.image_ids import ImageIds
from qkviz.search.indexing import IndexSummary, build_indexes
from qkviz.search.mips_index import EXACT_LIMIT, IndexInfo, build_inverted_lists, write_inverted_lists
from qkviz.search.partner_index import (IndexTarget, LayoutOverlap, PartnerIndexes, Partners, head_layout_overlap,
                                        index_targets, layout_overlap)
from qkviz.search.token_index import TokenIndex, load_token_index, normalise, run_token_index

__all__ = ["EXACT_LIMIT", "ImageIds", "IndexInfo", "IndexSummary", "IndexTarget", "LayoutOverlap", "PartnerIndexes", "Partners",
           "TokenIndex", "build_indexes", "head_layout_overlap", "index_targets", "layout_overlap",
           "load_token_index", "normalise", "run_token_index",
           "build_inverted_lists", "write_inverted_lists"]
