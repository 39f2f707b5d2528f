"""The qkviz web app: matrix, single-head, sentence, positions, heads and compare views of a run, with global
token search, the head atlas and related heads.

``qkviz serve --run R`` starts it (:mod:`dash_app.server`); :func:`dash_app.app.create_app` builds it for
tests and embedding. It reads runs through qkviz's public API only (``qkviz`` and its subpackages' names).

Layout:

* ``app.py`` -- the shell: ``create_app``, the top bar, the stores, and the one state callback that turns
  every user action into the next :class:`~dash_app.state.view_state.ViewState`, all derived from the views registry;
* ``server.py`` -- ``qkviz serve``: open the runs, build the app, serve it; ``wsgi_server.py`` -- waitress, the
  production server, and the path prefix behind a proxy; ``guard.py`` -- what the server accepts (hosts, body
  size, callback requests) and its 400 / 500 answers; ``notebook.py`` -- ``run.show()``;
* ``views/`` -- one module per view (single, sentence, positions, heads, compare; the matrix view is a package of
  its parts, ``views/matrix/``): its layout, its figures, its own callbacks (``register``) and its declaration to the registry;
* ``panels/`` -- the single view's side panels (atlas, partners, related, selection);
* ``assets/`` -- the CSS and the clientside JavaScript (functions of ``window.dash_clientside.qkviz``),
  served by Dash as files;
* ``state/`` -- the view state and what changes it: ``view_state.py`` (the state and its transitions),
  ``view_registry.py`` (the views registry: each view declares itself once, ``register_view``), ``events.py`` (the
  browser's events: relayed into stores, read back, and the transitions they make), ``control_options.py`` (the
  options of the controls that set a state field);
* ``data/`` -- what the app reads of its runs: ``run_data.py`` (one run as the app reads it), ``token_search.py``
  (the top bar's search over a run, cached: its matches and clusters are ``qkviz.search``'s and
  ``qkviz.analysis``'s), ``atlas_columns.py`` (the head atlas's columns as shown), ``image_patches.py`` (an image
  run's pixels) and ``attention_changes.py`` (the compare view's tables);
* ``ids.py`` (every component id), ``url_state.py`` (the URL <-> state), ``figure_parts.py`` (colours and scales,
  safe text, empty figures, opacity steps, legends, typed arrays; the token colour features are
  ``qkviz.report``'s), ``explain_worker.py`` (the model's work off the request thread), ``progress.py`` and
  ``deferred_graphs.py`` (layouts made in the background; graphs put in the page when their view first shows).
  The sentence view's adjusted attention is ``qkviz.analysis``'s.
"""
