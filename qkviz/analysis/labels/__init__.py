"""The labels a head earns: each label's thresholds, the single pattern label of an image head, and the label table
(every label with its evidence, its chance level and the queries it rests on)."""

from qkviz.analysis.labels.head_labels import LABELS, LabelThresholds, head_label
from qkviz.analysis.labels.label_table import (LABEL_COLUMNS, as_label_table, corpus_labels, probe_labels,
                                               strongest_labels)

__all__ = ["LABELS", "LABEL_COLUMNS", "LabelThresholds", "as_label_table", "corpus_labels", "head_label",
           "probe_labels", "strongest_labels"]
