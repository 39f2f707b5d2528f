"""Top-k search, below everything that searches: each row's ``k`` best columns by inner product (exact with
faiss, or an approximate inverted file; :func:`top_products`, and :func:`top_logits` for the model's logits), by
cosine, by Euclidean distance, over arrays or a run's memory-mapped vectors (:mod:`qkviz.neighbours.top_k`);
and partner recall, how many of each point's attention partners a layout keeps near
(:mod:`qkviz.neighbours.partner_recall`); trustworthiness, how many of each layout point's near points are near in the
space it lays out, and the layouts' goals on both (:mod:`qkviz.neighbours.trust`).

Imports numpy, faiss (inside the functions that search) and :mod:`qkviz.core`; no file, no run format.
"""

from qkviz.neighbours.partner_recall import PartnerSample, layout_recall, partner_recall, partner_sample
from qkviz.neighbours.top_k import (MappedVectors, nearest_cosine, nearest_euclidean, tie_aware_recall, top_logits,
                                    top_products, unit_rows)
from qkviz.neighbours.trust import (RECALL_GOAL, TRUST_GOAL, TRUST_K, TRUST_SAMPLE, TrustReference, goal_verdict, layout_trust,
                                    meets_goals, reference_trust, trust_reference, trustworthiness)

__all__ = ["RECALL_GOAL", "TRUST_GOAL", "TRUST_K", "TRUST_SAMPLE", "MappedVectors", "PartnerSample", "TrustReference",
           "goal_verdict", "layout_recall", "layout_trust", "meets_goals", "nearest_cosine", "nearest_euclidean",
           "partner_recall", "partner_sample", "reference_trust", "tie_aware_recall", "top_logits", "top_products",
           "trust_reference", "trustworthiness", "unit_rows"]
