"""Per-token colour features, computed once per run from its token table (numpy / pandas only).

Every feature is one float32 value per token (``[token]``); a point of the joint layout takes its
token's value, queries and keys alike. The vector norm is per head and comes from the run's
vectors instead (the app's ``RunData.norms``, or :meth:`qkviz.Run.plot`). The app colours its views with these,
and ``Run.plot`` its figures.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from qkviz.search import normalise

#: colour option -> label shown in the app. "type" is query vs key; "norm" is per head.
COLOURS = {
    "type": "query vs key",
    "position": "normalised position",
    "position_mod5": "position mod 5",
    "punctuation": "punctuation / special token",
    "norm": "vector norm",
    "token_length": "token length",
    "sentence_length": "sentence length",
    "frequency": "token frequency in the corpus",
    "patch_row": "patch row (special tokens -1)",
    "patch_col": "patch column (special tokens -1)",
    "image": "image (its number in the run)",
}
#: the features of image runs (their tokens are patches: see :mod:`qkviz.extraction.writing.image_tokens`)
IMAGE_COLOURS = ("type", "position", "norm", "patch_row", "patch_col", "image")
#: the features of text runs (every other one: what a patch has no word for, or no place for)
TEXT_COLOURS = tuple(name for name in COLOURS if name not in ("patch_row", "patch_col", "image"))
#: features drawn on a log10 scale (their values span orders of magnitude).
LOG_SCALE = {"frequency"}
PUNCTUATION_CLASSES = ("word", "punctuation", "special token")
#: features whose values are categories (value ``i`` is category ``i``): a legend, never a continuous scale
CATEGORIES = {"punctuation": PUNCTUATION_CLASSES, "position_mod5": ("0", "1", "2", "3", "4")}
_PUNCTUATION = r"^[^\w\s]+$"


def colour_choices(tokens: pd.DataFrame) -> tuple[str, ...]:
    """The colour features offered for a run with this token table: :data:`IMAGE_COLOURS` for an image run's,
    :data:`TEXT_COLOURS` otherwise."""
    return IMAGE_COLOURS if "patch_row" in tokens.columns else TEXT_COLOURS


def token_features(tokens: pd.DataFrame) -> pd.DataFrame:
    """One row per token: position, position_mod5, punctuation, token_length, sentence_length, frequency,
    patch_row, patch_col, image.

    ``position`` is the position within the sentence divided by the sentence's last position (0 to
    1); ``punctuation`` is 0 for a word piece, 1 for punctuation, 2 for a special token. ``patch_row`` and
    ``patch_col`` are an image run's patch place (-1 for special tokens, and for every token of a text run);
    ``image`` the image's (sentence's) number."""
    text = tokens.token.astype(str).str.strip()
    sentence_length = tokens.groupby("sentence").position.transform("size").to_numpy()
    punctuation = np.where(tokens.is_special.to_numpy(), 2, text.str.match(_PUNCTUATION).to_numpy().astype(int))
    lowered = pd.Series(normalise(tokens.token))
    frequency = lowered.map(lowered.value_counts()).to_numpy()
    features = {
        "position": tokens.position.to_numpy() / np.maximum(sentence_length - 1, 1),
        "position_mod5": tokens.position.to_numpy() % 5,
        "punctuation": punctuation,
        "token_length": text.str.len().to_numpy(),
        "sentence_length": sentence_length,
        "frequency": frequency,
        "patch_row": tokens.patch_row.to_numpy() if "patch_row" in tokens.columns else np.full(len(tokens), -1),
        "patch_col": tokens.patch_col.to_numpy() if "patch_col" in tokens.columns else np.full(len(tokens), -1),
        "image": tokens.sentence.to_numpy(),
    }
    return pd.DataFrame({name: np.asarray(values, dtype=np.float32) for name, values in features.items()})


def colour_values(values: np.ndarray, colour: str) -> np.ndarray:
    """The float32 values a colour scale maps (``log10`` for :data:`LOG_SCALE` features)."""
    values = np.asarray(values, dtype=np.float32)
    return np.log10(np.maximum(values, 1)).astype(np.float32) if colour in LOG_SCALE else values


def describe_value(colour: str, value: float) -> str:
    """A feature value as a person reads it (``"punctuation"`` rather than ``1.0``)."""
    if colour == "punctuation":
        return PUNCTUATION_CLASSES[int(value)]
    if colour in ("position_mod5", "token_length", "sentence_length", "frequency", "patch_row", "patch_col", "image"):
        return str(int(value))
    return f"{value:.3g}"


def colour_title(colour: str) -> str:
    """The colour bar's title: the feature's name, with the unit of a log-scale feature's ticks."""
    return f"{COLOURS[colour]} (count, log scale)" if colour in LOG_SCALE else COLOURS[colour]


def colour_ticks(colour: str, low: float, high: float) -> dict:
    """``tickvals`` / ``ticktext`` of a colour bar over ``[low, high]`` (in :func:`colour_values`' units):
    the counts 1, 10, 100, ... at their log10 for a :data:`LOG_SCALE` feature, with 2 and 5 between
    them when the range spans less than three decades; ``{}`` (Plotly's own ticks) for any other."""
    if colour not in LOG_SCALE:
        return {}
    steps = (1, 2, 5) if high - low < 3 else (1,)
    counts = [step * 10 ** decade for decade in range(int(np.floor(low)), int(np.ceil(high)) + 1) for step in steps]
    shown = [count for count in counts if low - 1e-6 <= np.log10(count) <= high + 1e-6] or [round(10 ** low)]
    return {"tickvals": [float(np.log10(count)) for count in shown], "ticktext": [f"{count:,}" for count in shown]}
