"""Which layout methods qkviz makes and shows when it is told none: the one module besides the methods' own
that names them (the methods themselves are declared in :mod:`qkviz.projection.methods`)."""

#: Made first for every head: seconds for a whole run, and what the app shows while the others are made.
FIRST_METHOD = "pca"
#: The layout a run is meant to be read in: its neighbour graph is each token's strongest attention partners,
#: which ``bench/faithful.py`` found keeps 5-40x more of them than t-SNE, in less time per head.
LAYOUT_METHOD = "attn-tsne"
#: What :func:`qkviz.project` and ``qkviz project`` make when asked for no method.
DEFAULT_METHODS = (FIRST_METHOD, LAYOUT_METHOD)
#: What ``qkviz serve`` and ``run.show()`` make in the background.
BACKGROUND_METHOD = LAYOUT_METHOD
