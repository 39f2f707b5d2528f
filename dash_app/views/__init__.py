"""The app's views, one module each, as Dash pages are: matrix, single, sentence, positions, heads, compare.

Each view module has ``layout(context)`` (its container, hidden unless the state shows it), plain functions that
turn a :class:`~dash_app.state.view_state.ViewState` and a :class:`~dash_app.data.run_data.RunData` into figures and components
(tested without Dash), and ``register(app, context)``, which adds the view's callbacks (drawing from the state);
it ends by declaring itself to :mod:`dash_app.state.view_registry` (``VIEW = register_view(View(...))``), from which
the shell derives its tabs, stores, state inputs and URL. Importing this package imports every module in it, so
that each view registers itself (as Dash finds the pages in ``pages/``); the others (``single_figure``,
``document_figure``, ...) are a view's parts. The matrix view and its parts are the package ``matrix``.
"""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
