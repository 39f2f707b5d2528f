"""The qkviz web app: matrix, single-head and sentence views of a run, with global token search.

``qkviz serve --run R`` starts it; :func:`dash_app.app.create_app` builds it for tests and embedding.
"""
