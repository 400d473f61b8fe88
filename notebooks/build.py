"""Write the notebooks of this folder from the cells below, without outputs: `python notebooks/build.py`.

Edit here, not in the .ipynb files, so that a change is a readable diff. Every notebook reads a run folder
(`TOKENMILL_RUN`, default the demo run `make demo` writes) through `tokenmill.inspect`; training.ipynb reads a
training output folder (`TOKENMILL_TRAIN`), ablate.ipynb an ablation folder (`TOKENMILL_ABLATION`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

IMPORTS = '''\
import os

%matplotlib inline
import tokenmill.inspect as ti
from tokenmill.inspect import plots
from tokenmill.inspect import table

'''
SETUP = IMPORTS + 'RUN = os.environ.get("TOKENMILL_RUN", "../build/demo/run")  # parameter: a run folder (the config\'s `output`)\n'
TRAIN_SETUP = IMPORTS + ('TRAIN = os.environ.get("TOKENMILL_TRAIN", "../build/demo/run/train")  '
                         "# parameter: a train config's `output`\n")

# The faults of a training run on its loss curve (issue 22): what `tokenmill train doctor` reports, by step and kind.
FAULT_MARKS = '''\
from pathlib import Path

from matplotlib.figure import Figure

from tokenmill.train.doctor import diagnose

found = diagnose(Path(TRAIN))
print(found.summary())
# kind -> (marker, colour); a kind not listed here (a newer doctor's) gets a star
KINDS = {"data": ("v", "C3"), "rank": ("D", "C4"), "spike": ("X", "red"), "hang": ("s", "black"),
         "hardware": ("P", "C1"), "transient": ("o", "C2")}
fig = Figure(figsize=(9, 3.5), layout="constrained")
ax = fig.subplots()
for k, seg in enumerate(ti.loss_segments(m["train"])):
    ax.plot([r["step"] for r in seg], [r["loss"] for r in seg], color="C0", alpha=1.0 if k == 0 else 0.6,
            label="train loss" if k == 0 else None)
first_loss = {}  # a step's first loss: the one its fault was seen on (a rolled-back step is trained again)
for r in m["train"]:
    first_loss.setdefault(r["step"], r["loss"])
by_kind = {}
for f in found.faults:
    by_kind.setdefault(f.kind, []).append(f)
for kind, faults in by_kind.items():
    marker, colour = KINDS.get(kind, ("*", "C5"))
    steps = [f.step for f in faults]
    losses = [first_loss.get(s, first_loss[max([t for t in first_loss if t < s] or [min(first_loss)])])
              for s in steps]
    ax.plot(steps, losses, marker, color=colour, markersize=11, markeredgecolor="white", linestyle="none",
            label=f"{kind} ({len(faults)})", gid=f"fault:{kind}")
ax.set_xlabel("step")
ax.set_ylabel("loss")
ax.set_title("faults on the loss curve")
ax.legend()
drawn = [(line.get_gid()[6:], [int(x) for x in line.get_xdata()]) for line in ax.lines
         if (line.get_gid() or "").startswith("fault:")]
print("marked on the loss curve: " + ("; ".join(f"{kind} at step {', '.join(map(str, steps))}"
                                               for kind, steps in drawn) or "nothing (no faults)"))
fig'''

NOTEBOOKS: dict[str, list[tuple[str, str]]] = {
    "inspect_samples": [
        ("md", "# Samples of a run\nRandom kept documents per source, dropped ones per reason, a document before and "
               "after cleaning, and escape leaks (docs/clean.md). `SEED` picks other documents."),
        ("code", SETUP + 'SEED = 0\nSTAGE = "clean"'),
        ("md", "## Kept documents, two per source"),
        ("code", 'for source, rows in ti.samples_per_source(RUN, STAGE, n=2, seed=SEED).items():\n'
                 '    display(table(rows, ["id", "source", "subset", "lang", "text"], max_chars=400))'),
        ("md", "## Dropped documents: counts per reason, then one example of each"),
        ("code", "plots.drop_bars(RUN, STAGE)"),
        ("code", 'table(ti.drop_counts(RUN, STAGE))'),
        ("code", 'rows = [r for rs in ti.samples_per_reason(RUN, STAGE, n=1, seed=SEED).values() for r in rs]\n'
                 'table(rows, ["drop_reason", "id", "source", "subset", "text"], max_chars=400)'),
        ("md", "## A document before and after cleaning\nOne that an escape repair changed; set `DOC_ID` for another."),
        ("code", 'DOC_ID = None\n'
                 'doc = ti.before_after(RUN, DOC_ID, seed=SEED, step="escape_repair" if DOC_ID is None else None)\n'
                 'print(doc["id"], doc["source"], doc["clean_steps"], doc["escape_counts"], doc["drop_reason"])\n'
                 'print("\\n".join(doc["diff"][:40]))'),
        ("md", "## Escape leaks\nPer source, then examples: dropped (`escape_<kind>`), repaired, flagged."),
        ("code", "table(ti.leak_summary(RUN))"),
        ("code", 'table(ti.escape_leaks(RUN, n=3, seed=SEED), max_chars=400)'),
    ],
    "dedup_clusters": [
        ("md", "# Duplicate clusters\nWhat the dedup stage found (docs/dedup.md): cluster sizes, then the largest "
               "clusters side by side, each member with its Jaccard similarity to the document that removed it."),
        ("code", SETUP + "K = 3"),
        ("code", "plots.cluster_size_bars(RUN)"),
        ("code", "table(ti.cluster_summary(RUN))"),
        ("code", 'for c in ti.largest_clusters(RUN, k=K, chars=600):\n'
                 '    print(f"cluster {c[\'cluster\']}: {c[\'size\']} documents")\n'
                 '    display(table(c["members"], ["id", "source", "kept", "reason", "removed_by", "jaccard", "text"],'
                 ' max_chars=600))'),
    ],
    "tokens": [
        ("md", "# Tokens\nThe tokenize stage's output (docs/tokenize.md): tokens per source, document lengths, and "
               "documents decoded back from the token files."),
        ("code", SETUP + 'SEED = 0\nSPLIT = "train"'),
        ("code", "plots.tokens_per_source(RUN)"),
        ("code", "table(ti.token_counts(RUN))"),
        ("code", "plots.length_histograms(RUN, SPLIT)"),
        ("code", "table(ti.length_percentiles(RUN, SPLIT))"),
        ("code", 'for d in ti.decoded_samples(RUN, n=3, seed=SEED, split=SPLIT):\n'
                 '    print(f"--- {d[\'source\']} {d[\'id\']} ({d[\'tokens\']} tokens, {d[\'prefix\']} #{d[\'index\']})")\n'
                 '    print(d["text"])'),
    ],
    "contamination": [
        ("md", "# Contamination\nEvaluation-set items found in the corpus by the decontaminate stage "
               "(docs/decontaminate.md), per evaluation set and source, and the matched text."),
        ("code", SETUP + "SEED = 0"),
        ("code", "table(ti.evalset_summary(RUN))"),
        ("code", "plots.contamination_bars(RUN)"),
        ("code", "table(ti.contamination_hits(RUN))"),
        ("code", 'table(ti.hit_examples(RUN, n=5, seed=SEED), max_chars=400)'),
    ],
    "classifiers": [
        ("md", "# Quality classifiers\nWhat each fastText classifier of the clean stage did (docs/classifier.md, "
               "\"Auditing a classifier\"): its score histogram per source with the threshold applied, from the clean "
               "manifest's `report.classifiers`, then documents just above and just below the threshold, and the "
               "best and worst documents by score (kept and dropped together; `tokenmill inspect RUN --sort "
               "<name>_score` prints the same)."),
        ("code", SETUP + "N = 3"),
        ("code", 'report = ti.classifier_report(RUN)\n'
                 'if not report:\n'
                 '    print("no classifier ran in this run\'s clean stage (stages.clean.classifiers is empty): "\n'
                 '          "nothing to plot")\n'
                 'table(ti.classifier_summary(RUN))'),
        ("code", "if report:\n    display(plots.score_histograms(RUN))"),
        ("md", "## Around the threshold\nPer classifier, source and threshold: the documents scoring just above it "
               "(kept by it) and just below it (dropped by it, or already dropped by an earlier filter)."),
        ("code", 'for name in report:\n'
                 '    display(table(ti.around_threshold(RUN, name, n=N), ["source", "threshold", "side", '
                 'f"{name}_score", "status", "drop_reason", "id", "text"], max_chars=300))'),
        ("md", "## Best and worst by score"),
        ("code", 'for name in report:\n'
                 '    found = ti.ranked(RUN, column=f"{name}_score", n=N, chars=300)\n'
                 '    for side in ("best", "worst"):\n'
                 '        print(f"{side} by {name}_score")\n'
                 '        display(table(found[side], [f"{name}_score", "status", "drop_reason", "id", "source", '
                 '"text"]))'),
    ],
    "training": [
        ("md", "# Training\nA `tokenmill train` output folder: loss and valid loss, learning rate and gradient norm "
               "against step, spikes and rollbacks marked, and the documents of the batch behind each rollback."),
        ("code", TRAIN_SETUP),
        ("code", "plots.training_curves(TRAIN)"),
        ("code", 'm = ti.training_metrics(TRAIN)\nlast = m["train"][-1]\n'
                 'print(f"{len(m[\'train\'])} steps logged, last step {last[\'step\']}: loss {last[\'loss\']:.4f}, "\n'
                 '      f"{last[\'tokens\']:,} tokens, {last[\'tokens_per_s\']:,.0f} tokens/s, rollbacks {last[\'rollbacks\']}")\n'
                 'table(m["valid"])'),
        ("md", "## Faults on the loss curve\nThe run's faults as `tokenmill train doctor` finds them "
               "(`tokenmill.train.doctor.diagnose`), each at its step, one marker and colour per kind: a rollback of "
               "bad data, a rank flagged by its fingerprints, a spike that stopped the run, a hang, and the replay's "
               "hardware and transient faults. A hang has no loss of its own: it sits on the last loss before it."),
        ("code", FAULT_MARKS),
        ("md", "## Events\nResumes, rollbacks (reason, skipped batches, learning-rate scale) and skips."),
        ("code", 'events = ti.training_events(TRAIN)\n'
                 'table([{k: v for k, v in e.items() if k != "documents"} for e in events])'),
        ("code", 'table(ti.event_documents(TRAIN), ["step", "reason", "batch", "sample_in_batch", "source", "id", '
                 '"document_tokens", "preview"], max_chars=200)'),
    ],
}


# The ablation notebook (issue 34): it reads an ablation folder's report.json (`TOKENMILL_ABLATION`), not a run
# folder, so tests/inspect/test_notebooks.py leaves it out and tests/ablate/notebook.py executes it.
ABLATION_NOTEBOOKS: dict[str, list[tuple[str, str]]] = {
    "ablate": [
        ("md", "# `tokenmill ablate`: curves with their intervals, early stops, the mixture search\n\nReads an "
               "ablation folder's `report.json` (`tokenmill ablate CONFIG` or `tokenmill ablate report DIR` writes "
               "it). Set `TOKENMILL_ABLATION` to the folder (the ablation config's `output`)."),
        ("code", '''\
import json
import os
from pathlib import Path

%matplotlib inline
from matplotlib.figure import Figure

ABLATION = Path(os.environ.get("TOKENMILL_ABLATION", "../build/ablation"))  # parameter: an ablation folder
report = json.loads((ABLATION / "report.json").read_text())
print(sorted(report))'''),
        ("md", "## Each metric's curve per variant\n\nThe mean over seeds and its 95% interval at every evaluation "
               "point, against training tokens; a variant stopped early ends at its stop (a cross)."),
        ("code", '''\
variants = report.get("variants", {})
metrics = sorted(report.get("metrics", {}))
figures = []
for metric in metrics:
    fig = Figure(figsize=(8, 3.5), layout="constrained")
    ax = fig.subplots()
    for k, (name, v) in enumerate(variants.items()):
        curve = v["metrics"][metric]
        x = [c["tokens"] for c in curve]
        ax.plot(x, [c["mean"] for c in curve], color=f"C{k}", label=name)
        ax.fill_between(x, [c["low"] for c in curve], [c["high"] for c in curve], color=f"C{k}", alpha=0.2)
        if "stopped_at" in v:
            ax.plot([x[-1]], [curve[-1]["mean"]], "x", color=f"C{k}", markersize=10)
    direction = "lower is better" if report["metrics"][metric]["lower_is_better"] else "higher is better"
    ax.set(title=f"{metric} ({direction})", xlabel="training tokens")
    ax.legend()
    figures.append(fig)
    display(fig)
print(f"{len(figures)} metric(s)")'''),
        ("md", "## Each variant against the base\n\nThe difference (variant - base) and its paired bootstrap interval "
               "at every point; the verdict holds where the band leaves 0."),
        ("code", '''\
comparisons = report.get("comparisons", {})
for metric in metrics:
    if not comparisons:
        break
    fig = Figure(figsize=(8, 3), layout="constrained")
    ax = fig.subplots()
    ax.axhline(0, color="grey", linewidth=1)
    for k, (name, c) in enumerate(comparisons.items(), start=1):
        points = c[metric]["points"]
        x = [p["tokens"] for p in points]
        ax.plot(x, [p["difference"] for p in points], color=f"C{k}", label=f"{name}: {c[metric]['verdict']}")
        ax.fill_between(x, [p["low"] for p in points], [p["high"] for p in points], color=f"C{k}", alpha=0.2)
    ax.set(title=f"{metric}: variant - {report['base']}", xlabel="training tokens")
    ax.legend()
    display(fig)'''),
        ("md", "## Early stopping\n\nWhere each variant was stopped (or, with `apply: false`, would have been), the "
               "compute saved, and the rule checked on the runs trained to the end."),
        ("code", '''\
es = report.get("early_stop")
if es is None:
    print("no early_stop block in this ablation")
else:
    print(f"rule on {es['metric']}, patience {es['patience']}, apply {es['apply']}; best at the end: {es['best_at_end']}")
    for name, v in es["variants"].items():
        where = f"step {v['step']} ({v['fraction_of_budget']:.0%}), saved {v['saved']['tokens']:,.0f} tokens" \\
            if "step" in v else "trained to the end"
        print(f"  {name}: {where}; final verdict against the best: {v['final_verdict_against_best']}")
    for row in es["check"]:
        print(f"  patience {row['patience']}: {row['would_stop']} of {row['runs_checked']} finished variants would "
              f"stop, {row['wrong']} wrongly")'''),
        ("md", "## Mixture search\n\nEach mixture run's target loss against each source's weight, the natural and "
               "predicted weights, and the check's losses per seed."),
        ("code", '''\
m = report.get("mixture")
if m is None:
    print("no mixture block in this ablation")
else:
    sources = m["sources"]
    fig = Figure(figsize=(3 * len(sources), 3), layout="constrained")
    axes = fig.subplots(1, len(sources), sharey=True)
    for ax, s in zip(axes, sources):
        ax.scatter([r["weights"][s] for r in m["runs"]], [r["loss"] for r in m["runs"]], s=14)
        ax.axvline(m["natural"][s], color="grey", linestyle="--", label="natural")
        ax.axvline(m["predicted"][s], color="C3", label="predicted")
        ax.set(title=s, xlabel="weight")
    axes[0].set_ylabel("target bits per byte")
    axes[0].legend()
    display(fig)
    arms = m["check"]["arms"]
    for arm in ("natural", "predicted"):
        loss = arms[arm]["loss"]
        print(f"{arm}: {loss['mean']:.4f} [{loss['low']:.4f}, {loss['high']:.4f}] per seed {arms[arm]['per_seed']}")
    d = m["check"]["difference"]
    print(f"predicted - natural: {d['predicted_minus_natural']:+.4f} [{d['low']:+.4f}, {d['high']:+.4f}]: {d['verdict']}")'''),
    ],
}


def build(name: str, cells: list[tuple[str, str]]) -> nbformat.NotebookNode:
    nb = new_notebook(cells=[new_markdown_cell(src) if kind == "md" else new_code_cell(src) for kind, src in cells])
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"}}
    for i, cell in enumerate(nb.cells):
        cell.id = f"{name}-{i}"  # stable ids: rebuilding gives the same bytes
    return nb


def main(out_dir: Path = HERE) -> list[Path]:
    paths = []
    for name, cells in {**NOTEBOOKS, **ABLATION_NOTEBOOKS}.items():
        nb = build(name, cells)
        nbformat.validate(nb)
        path = out_dir / f"{name}.ipynb"
        nbformat.write(nb, str(path))
        paths.append(path)
    return paths


if __name__ == "__main__":
    for p in main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE):
        print(p)
