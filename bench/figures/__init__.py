"""The figure blocks: what the README and the docs pages say from ``bench/results/*.json``.

``python -m bench.figures`` rewrites every block (``--check``: exit 1 when a page is out of date); :mod:`.pages` is
that command, :mod:`.results` reads the result files (through :mod:`bench.schema`) and names them on the pages,
:mod:`.goals` holds the one rule by which a goal is met or not, and each other module renders the blocks of one
area (``@figure("name")``): :mod:`.readme` the README's, :mod:`.app`, :mod:`.dask`, :mod:`.docs`, :mod:`.methods`,
:mod:`.scale`, :mod:`.search` and :mod:`.tools` the docs pages'.
"""
