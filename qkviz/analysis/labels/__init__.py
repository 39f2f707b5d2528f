"""The labels a head earns: every label declared once (its rule, threshold, chance, colour and description) with the
thresholds, the single pattern label of an image head, and the label table (every label with its evidence, its
chance level and the queries it rests on)."""

from qkviz.analysis.labels.head_labels import head_label
from qkviz.analysis.labels.label_table import (LABEL_COLUMNS, as_label_table, corpus_labels, probe_labels,
                                               strongest_labels)
from qkviz.analysis.labels.registry import (ABLATED_LABELS, BOTH, COPYING_LABELS, FIXED_OFFSET, HEAD_LABEL, HEAD_LABELS,
                                            IMAGE, INDUCTION, LABEL_COLOURS, LABELS, TEXT, THRESHOLD_OPTIONS, HeadLabel,
                                            WRITING_LABELS, LabelThresholds, labels_markdown, threshold_meaning,
                                            threshold_option)
from qkviz.analysis.labels.writing_rule import writing_labels

__all__ = ["ABLATED_LABELS", "BOTH", "COPYING_LABELS", "FIXED_OFFSET", "HEAD_LABEL", "HEAD_LABELS", "IMAGE", "INDUCTION",
           "LABELS", "LABEL_COLOURS", "LABEL_COLUMNS", "TEXT", "THRESHOLD_OPTIONS", "HeadLabel", "LabelThresholds",
           "as_label_table",
           "corpus_labels", "head_label", "labels_markdown", "probe_labels", "strongest_labels", "threshold_meaning",
           "threshold_option", "WRITING_LABELS", "writing_labels"]
