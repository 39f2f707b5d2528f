"""The qkviz web app: matrix, single-head, sentence, positions and heads views of a run, with global token
search, the head atlas and related heads.

``qkviz serve --run R`` starts it (:mod:`dash_app.server`); :func:`dash_app.app.create_app` builds it for
tests and embedding. It reads runs through qkviz's public API only (``qkviz`` and its subpackages' names).

Layout:

* ``app.py`` -- the shell: ``create_app``, the top bar, the stores, and the one state callback that turns
  every user action into the next :class:`~dash_app.state.ViewState`;
* ``server.py`` -- ``qkviz serve``: open the runs, build the app, serve it;
* ``views/`` -- one module per view (matrix, single, sentence, positions, heads): its layout, its figures
  and its own callbacks (``register``);
* ``panels/`` -- the single view's side panels (atlas, partners, related);
* ``assets/`` -- the CSS and the clientside JavaScript (functions of ``window.dash_clientside.qkviz``),
  served by Dash as files;
* ``ids.py`` (every component id), ``state.py`` (the view state and its transitions), ``url_state.py``
  (the URL <-> state), ``events.py`` (the browser's events: relayed into stores, read back);
* ``run_data.py`` (one run as the app reads it) and the helpers it and the views share: ``figures.py``
  (colours, safe text, empty figures; the token colour features are ``qkviz.analysis``'s), ``search.py`` (token
  search and clusters), ``attention_maps.py`` (the sentence view's attention), ``atlas_columns.py``
  (the head atlas's columns as shown).
"""
