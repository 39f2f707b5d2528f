"""The qkviz web app: matrix, single-head, sentence and positions views of a run, with global token
search and the head atlas.

``qkviz serve --run R`` starts it; :func:`dash_app.app.create_app` builds it for tests and embedding.
"""
