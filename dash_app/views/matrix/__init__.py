"""The matrix view: every head of the run at once, one small layout (or a heatmap cell) per head.

``view`` is the view itself (its layout, callbacks and registration); the others are its parts: ``grid`` (rows and
columns fitted to the window, which head sits where), ``cells`` (one heatmap cell per head, for hover and clicks and
an atlas column's colour), ``points`` (every head's queries and keys placed in its cell, and the search's matches),
``raster`` (the heads as one image, for runs too large to draw every point), ``figure`` (the figure of them all),
``filter`` (which heads a statistic or a label keeps) and ``message`` (the line above the figure). Importing the
package imports the view, so that it registers itself as the other views do.
"""

from dash_app.views.matrix import view  # noqa: F401  (registers the view)
