"""The qkviz web app: matrix, single-head, sentence, positions and heads views of a run, with global token
search, the head atlas and related heads.

``qkviz serve --run R`` starts it; :func:`dash_app.app.create_app` builds it for tests and embedding.
"""
