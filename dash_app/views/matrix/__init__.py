"""The matrix view: every head of the run at once, one small layout (or a heatmap cell) per head.

``view`` is the view itself (its layout, callbacks and registration); the others are its parts: ``grid`` (the
grid's geometry), ``cells`` (the heatmap cells and their badges), ``points`` (each head's points placed in its
cell), ``raster`` (the heads drawn as one image past a point budget), ``figure`` (the figure of them all),
``filter`` and ``message`` (which heads show, and the line that says so). Importing the package imports the view,
so that it registers itself as the other views do.
"""

from dash_app.views.matrix import view  # noqa: F401  (registers the view)
