"""The single-head view's side panels: the head atlas (:mod:`~dash_app.panels.atlas`), the corpus partners of a
clicked point (:mod:`~dash_app.panels.partners`), the related heads (:mod:`~dash_app.panels.related`) and the ablate
action (:mod:`~dash_app.panels.ablation`).

Each builds plain-text Dash components from a :class:`~dash_app.data.run_data.RunData` and has ``register``,
which :func:`dash_app.views.single.register` calls to add the panel's callbacks and the clientside relay
of its buttons' clicks.
"""
