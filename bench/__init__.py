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
``tests/integration/test_bench_smoke.py`` runs every module of this package that has a ``main`` with ``--smoke``, so a
new bench is smoke-run in CI without being listed anywhere.

A new bench, in about ten lines::

    import argparse
    from bench.harness import Recorder, repeat, smoke_arguments

    def main(argv=None):
        parser = argparse.ArgumentParser(description="what it measures")
        parser.add_argument("--tokens", type=int, default=5000)
        args = smoke_arguments(parser, argv, tokens=200)     # adds --smoke / --out; --smoke swaps in tiny values
        recorder = Recorder("my_bench", vars(args), args.out)  # load sampling starts here
        seconds = repeat(lambda: work(args.tokens), repeats=3)    # min / median / max and the values
        print(recorder.write(seconds=seconds))

    if __name__ == "__main__":
        main()
"""
