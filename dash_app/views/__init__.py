"""The app's five views, one module each, as Dash pages are: matrix, single, sentence, positions, heads.

Each module has ``layout()`` (its container, hidden unless the state shows it), plain functions that
turn a :class:`~dash_app.state.ViewState` and a :class:`~dash_app.run_data.RunData` into figures and
components (tested without Dash), and ``register(app, runs, ...)``, which the shell calls to add the
view's callbacks: drawing from the state, and the clientside relays of its clicks.
"""
