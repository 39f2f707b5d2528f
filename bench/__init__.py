"""qkviz's measurement lab: one module per bench, run as ``python -m bench.NAME`` from the checkout.

Every bench measures through :mod:`bench.harness` (timings as min / median / max, a child process's own peak
memory, the machine's load before, during and after, paired runs in alternating order) and writes one result file,
``bench/results/<name>.json``, through :class:`bench.harness.Recorder`, the only writer. The file follows
:mod:`bench.schema` (a versioned header: schema, bench, date, machine, load, commit with its dirty state, arguments;
then the figures), and ``python -m bench.schema`` validates every file. Pages read the figures through the figure
blocks (``python -m bench.figures``). A bench imports only qkviz's public names (``qkviz`` and its
subpackages' ``__init__``), which import-linter holds (``lint-imports``).

Every bench takes ``--smoke``: the same code on a tiny input (a tiny random model, a few sentences), its result
written to ``--out`` (a temporary file; a smoke run never writes into ``bench/results``).
``tests/integration/bench/test_bench_smoke.py`` runs every module of this package but :data:`NOT_BENCHES` with ``--smoke``
and the arguments of its ``SMOKE_ARGUMENTS`` (``{run}``: a copy of a tiny run, ``{model}``: a tiny model, ``{corpus}``:
a few sentences), and validates what it wrote, so a new bench is smoke-run in CI without being listed anywhere.

A new bench, ``bench/my_bench.py``, in about ten lines::

    import argparse
    from pathlib import Path
    from bench.harness import Recorder, repeat, smoke_arguments

    SMOKE_ARGUMENTS = ("--run", "{run}")       # what the smoke test passes besides --smoke (a copy of a tiny run)

    def main(argv=None):
        parser = argparse.ArgumentParser(description="what it measures")
        parser.add_argument("--run", type=Path, required=True)
        parser.add_argument("--repeats", type=int, default=5)
        parser.add_argument("--out", type=Path, help="default bench/results/my_bench.json")
        args = smoke_arguments(parser, argv, repeats=1)          # --smoke: these tiny values, --out a temporary file
        recorder = Recorder("my_bench", vars(args), args.out)    # the header; the load is sampled from here
        seconds = repeat(lambda: work(args.run), args.repeats)   # wall time: min / median / max and the values
        print(recorder.write(seconds=seconds))                   # figures under "figures", atomically

    if __name__ == "__main__":
        main()

Its figure block, if a page shows it, is a function in the bench's own module registered with ``@figure("name")``
(:func:`bench.figures.results.figure`; ``python -m bench.figures`` imports every module of this package to find
them), or, where the blocks are a concept of their own beside what the bench measures, in ``bench/NAME_figures.py``
(:mod:`bench.faithful_figures`, :mod:`bench.search_figures`; listed in :data:`NOT_BENCHES`); a goal it states is a
:class:`bench.figures.goals.Goal` declared there too and judged by :func:`bench.figures.goals.verdict`.
Only the README's summary blocks, which combine several benches' results, live in :mod:`bench.figures.readme`.
"""

#: the modules of this package that are not benches: the harness, the schema, the helpers some benches share, the parts
#: of a bench its command runs from modules of their own, and the figure blocks a bench keeps in a module of their own
NOT_BENCHES = ("harness", "schema", "head_survey", "modern_model", "search_timing", "search_tokens", "search_overlap",
               "search_large", "faithful_figures", "search_figures", "app_figures", "scale_figures",
               "extract_figures", "composition_view", "frontier_figures")
