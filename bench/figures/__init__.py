"""The figure blocks' machinery: what the README and the docs pages say from ``bench/results/*.json``.

``python -m bench.figures`` rewrites every block (``--check``: exit 1 when a page is out of date); :mod:`.pages` is
that command, and it imports every module of the bench package to register its blocks. A block is declared beside
the bench that writes its result file: ``@figure("name")`` (:func:`.results.figure`) in ``bench/NAME.py``, e.g. the
direct effects' block in ``bench/direct_effects.py``, or in ``bench/NAME_figures.py`` where the blocks are a concept of
their own, e.g. the search blocks in ``bench/search_figures.py`` and the extraction's in ``bench/extract_figures.py``.
:mod:`.results` reads the result files (through :mod:`bench.schema`), names them on the pages and holds the wording
several benches' blocks share; :mod:`.goals` holds the one rule by which a goal is met or not; :mod:`.readme` holds the
README's summary blocks, the only ones that combine several benches' results.
"""
