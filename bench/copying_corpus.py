"""The copying label's corpus form on text chosen after it was written: ``python -m bench.copying_corpus``.

Issue 51 asks that the atlas label SmolLM2's strongest induction head ``copying`` on held-out text written twice.
The corpus form of the copying probe (:mod:`qkviz.probes.writing_probe`) was added after the repeated-random-tokens
probe had missed that head, and its score on the test's text (``data/classics.txt`` lines 401-404) was seen before
the test was written. This bench measures it on passages fixed when the bench was written, before any of their
results was seen (``--passages``, 0-based line ranges of ``--text``: 1800-1803, 2400-2403, 3300-3303, which no test
or other bench reads), each written twice in one sequence:

* the run's strongest induction head by qkviz's own ranking (``copying_scores``, the corpus's induction attention);
* its ``copying`` score on the corpus form and on the probe, their chance, the queries each rests on, and whether
  the atlas's rule (``writing_labels``) labels it ``copying``;
* how many heads earn ``copying`` and ``suppression`` on each form, and on the shuffled control (which should be none).

Writes ``--out`` (``bench/results/copying_corpus.json``) with the date, the machine and the arguments.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
REPO = Path(__file__).resolve().parent.parent

import qkviz  # noqa: E402
from qkviz.analysis import LabelThresholds, copying_scores  # noqa: E402
from qkviz.analysis.labels import writing_labels  # noqa: E402
from qkviz.probes import copying_probe, run_language_model  # noqa: E402

from bench.figures.results import Results, figure, model_name, source  # noqa: E402
from bench.harness import Recorder, smoke_arguments  # noqa: E402

#: the passages, 0-based line ranges of data/classics.txt, fixed before any of their results was seen
PASSAGES = "1800:1804,2400:2404,3300:3304"
#: what the smoke test adds to ``--smoke``
SMOKE_ARGUMENTS = ("--model", "{model}", "--text", "{corpus}", "--work", "{tmp}")


def _heads(rows: list[tuple], label: str, form: str | None = None) -> set[tuple[int, int]]:
    """The heads of ``rows`` (label table rows) that earn ``label``, on the corpus form (``form`` "corpus") or the
    probe ("probe"), or on either."""
    return {(int(row[0]), int(row[1])) for row in rows if row[2] == label and (
        form is None or (form == "corpus") == str(row[7]).startswith("the corpus's own repeats"))}


def measure(model_name: str, passage: str, work: Path) -> dict:
    """One passage written twice: the run, its strongest induction head, the copying scores and labels."""
    run = qkviz.extract(model_name, [passage + " " + passage], work, progress=False, overwrite=True)
    model = run_language_model(run)
    if model.get_output_embeddings() is None:       # the smoke run's tiny model, saved without its head: a random one
        import transformers

        model = transformers.AutoModelForCausalLM.from_pretrained(run.manifest["model"]["id"]).eval()
    strongest = copying_scores(run).sort_values("induction", ascending=False).iloc[0]
    layer, head = int(strongest["layer"]), int(strongest["head"])
    table = copying_probe(run, model=model)
    thresholds = LabelThresholds()
    earned, control = writing_labels(table, thresholds), writing_labels(table, thresholds, control=True)
    mine = table[(table.layer == layer) & (table["head"] == head)].set_index("probe")
    found = {"tokens": int(run.n_tokens), "head": f"L{layer}H{head}", "induction": round(float(strongest["induction"]), 3),
             "labelled_copying": (layer, head) in _heads(earned, "copying")}
    for form, name in (("corpus", "copying-corpus"), ("probe", "copying")):
        if name in mine.index:
            found[form] = {"score": round(float(mine.loc[name, "score"]), 3),
                           "chance": round(float(mine.loc[name, "chance"]), 5),
                           "queries": int(mine.loc[name, "queries"]),
                           "shuffled": round(float(mine.loc[name + "-shuffled", "score"]), 3)}
        found[f"heads_{form}"] = {label: len(_heads(earned, label, form)) for label in ("copying", "suppression")}
    found["heads_control"] = {label: len(_heads(control, label)) for label in ("copying", "suppression")}
    print(f"{model_name} lines {passage[:30]!r}...: {found}")
    return found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--text", type=Path, default=REPO / "data" / "classics.txt")
    parser.add_argument("--passages", default=PASSAGES, help="0-based line ranges START:END, comma-separated")
    parser.add_argument("--work", type=Path, default=None, help="where the runs are made (a temporary folder)")
    parser.add_argument("--out", type=Path, default=None, help="the result file (default bench/results/copying_corpus.json)")
    args = smoke_arguments(parser, argv, out="out", passages="0:3")
    recorder = Recorder("copying_corpus", vars(args), out=args.out, smoke=args.smoke)
    lines = args.text.read_text(encoding="utf-8").splitlines()
    work = args.work or Path(tempfile.mkdtemp(prefix="qkviz-copying-"))
    passages = []
    for index, part in enumerate(args.passages.split(",")):
        start, end = (int(value) for value in part.split(":"))
        found = measure(args.model, " ".join(lines[start:end]), work / f"run-{index}")
        passages.append({"lines": f"{start + 1}-{end}", **found})
    print(f"wrote {recorder.write(model=args.model, passages=passages)}")


# The figure block drawn from this bench's result file (``python -m bench.figures``).

@figure("copying-corpus")
def copying_corpus_block(results: Results) -> str:
    found = results("copying_corpus")
    passages = found["passages"]
    labelled = sum(passage["labelled_copying"] for passage in passages)
    lines = [f"On {model_name(found['model'])}, {len(passages)} passages of `data/classics.txt` fixed before their results "
             "were seen, each written twice; the strongest induction head by qkviz's own ranking, its `copying` score on "
             "the corpus form and on the probe (queries; the shuffled control's score), and the heads each form labels:",
             "",
             "| lines | tokens | strongest induction head | corpus form | probe | labelled `copying` | heads copying / "
             "suppressing: corpus form; probe; control |",
             "|---|---|---|---|---|---|---|"]
    for passage in passages:
        def form(name: str) -> str:
            scores = passage.get(name)
            return (f"{scores['score']:.2f} ({scores['queries']:,}; {scores['shuffled']:.2f})" if scores
                    else "not measured")
        counts = "; ".join(f"{passage[key]['copying']} / {passage[key]['suppression']}"
                           for key in ("heads_corpus", "heads_probe", "heads_control"))
        lines.append(f"| {passage['lines']} | {passage['tokens']:,} | {passage['head']} ({passage['induction']:.2f}) | "
                     f"{form('corpus')} | {form('probe')} | {'yes' if passage['labelled_copying'] else 'no'} | {counts} |")
    lines += ["", f"The strongest induction head is labelled `copying` on {labelled} of {len(passages)} passages "
              f"(threshold `copy_share` 0.3, chance 5 / 2,000). `python -m bench.copying_corpus` "
              f"({source(results, 'copying_corpus')})."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
