"""Plots of a run and of a training job, each a ``matplotlib.figure.Figure`` made without pyplot (no global figure
state, no GUI backend; rendered by Agg when saved or shown inline in a notebook). Needs matplotlib (the
``notebooks`` extra).
"""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from tokenmill.inspect.clusters import cluster_sizes
from tokenmill.inspect.contamination import contamination_hits
from tokenmill.inspect.samples import drop_counts
from tokenmill.inspect.scores import classifier_report
from tokenmill.inspect.tokens import length_histogram, token_counts
from tokenmill.inspect.training import loss_segments, training_events, training_metrics


def _empty(ax, what: str) -> None:
    ax.text(0.5, 0.5, f"no {what}", ha="center", va="center", transform=ax.transAxes)
    ax.set_axis_off()


def drop_bars(run=None, stage: str = "clean") -> Figure:
    """Dropped documents per reason, stacked by source."""
    rows = drop_counts(run, stage)
    reasons = sorted({r["reason"] for r in rows}, key=lambda x: -sum(r["docs"] for r in rows if r["reason"] == x))
    sources = sorted({r["source"] for r in rows})
    fig = Figure(figsize=(8, 0.4 * max(len(reasons), 3) + 1.2), layout="constrained")
    ax = fig.add_subplot()
    if not rows:
        _empty(ax, f"documents dropped by {stage}")
        return fig
    left = np.zeros(len(reasons))
    for s in sources:
        docs = np.array([sum(r["docs"] for r in rows if r["reason"] == x and r["source"] == s) for x in reasons])
        ax.barh(reasons, docs, left=left, label=s)
        left += docs
    ax.invert_yaxis()
    ax.set_xlabel("documents")
    ax.set_title(f"{stage}: dropped documents per reason")
    ax.legend(fontsize="small", loc="lower right")
    return fig


def tokens_per_source(run=None) -> Figure:
    """Tokens per source, one bar per split."""
    rows = token_counts(run)
    sources = sorted({r["source"] for r in rows})
    splits = sorted({r["split"] for r in rows}, key=lambda s: s != "train")
    fig = Figure(figsize=(8, 4), layout="constrained")
    ax = fig.add_subplot()
    x = np.arange(len(sources))
    width = 0.8 / max(len(splits), 1)
    for k, split in enumerate(splits):
        values = [sum(r["tokens"] for r in rows if r["split"] == split and r["source"] == s) for s in sources]
        ax.bar(x + k * width, values, width, label=split)
    ax.set_xticks(x + width * (len(splits) - 1) / 2, sources, rotation=30, ha="right")
    ax.set_yscale("log")
    ax.set_ylabel("tokens")
    ax.set_title("tokens per source")
    ax.legend()
    return fig


def length_histograms(run=None, split: str | None = "train", bins: int = 30) -> Figure:
    """Document length in tokens per source, as step histograms on shared log-spaced bins."""
    edges, counts = length_histogram(run, split, bins)
    fig = Figure(figsize=(8, 4), layout="constrained")
    ax = fig.add_subplot()
    for source, c in counts.items():
        ax.stairs(c, edges, label=source)
    ax.set_xscale("log")
    ax.set_xlabel("tokens per document")
    ax.set_ylabel("documents")
    ax.set_title(f"document lengths ({split or 'all splits'})")
    ax.legend(fontsize="small", ncols=2)
    return fig


def cluster_size_bars(run=None) -> Figure:
    """Number of duplicate clusters per cluster size."""
    sizes = cluster_sizes(run)
    fig = Figure(figsize=(6, 3.5), layout="constrained")
    ax = fig.add_subplot()
    if not sizes:
        _empty(ax, "duplicate clusters")
        return fig
    ax.bar([str(s) for s in sizes], list(sizes.values()))
    ax.set_xlabel("cluster size (documents)")
    ax.set_ylabel("clusters")
    ax.set_title("duplicate clusters by size")
    return fig


def contamination_bars(run=None) -> Figure:
    """Contaminated documents per evaluation set, stacked by source."""
    rows = contamination_hits(run)
    fig = Figure(figsize=(7, 3.5), layout="constrained")
    ax = fig.add_subplot()
    if not rows:
        _empty(ax, "evaluation-set hits")
        return fig
    sets = sorted({r["evalset"] for r in rows})
    bottom = np.zeros(len(sets))
    for s in sorted({r["source"] for r in rows}):
        docs = np.array([sum(r["documents"] for r in rows if r["evalset"] == e and r["source"] == s) for e in sets])
        ax.bar(sets, docs, bottom=bottom, label=s)
        bottom += docs
    ax.set_ylabel("documents with hits")
    ax.set_title("contamination per evaluation set and source")
    ax.legend(fontsize="small")
    return fig


def _bin_counts(rows) -> np.ndarray:
    """Documents per bin of the clean stage's fixed logit bins, from the manifest's [low, high, documents] rows (the
    rows list only bins with any; each is found by its midpoint, which lies inside it whatever the rounding)."""
    from tokenmill.text.score_histogram import BINS, EDGES

    counts = np.zeros(BINS)
    for low, high, docs in rows:
        counts[min(max(int(np.searchsorted(EDGES, (low + high) / 2, side="right")) - 1, 0), BINS - 1)] += docs
    return counts


def score_histograms(run=None, stage: str = "clean") -> Figure:
    """Each classifier's score histogram per source (share of the source's scored documents per bin, on a logit
    axis: the manifest's bins are equal logit steps) with the thresholds applied to that source as dashed lines."""
    from tokenmill.text.score_histogram import EDGES

    report = classifier_report(run, stage)
    fig = Figure(figsize=(9, 3.2 * max(len(report), 1)), layout="constrained")
    if not report:
        _empty(fig.add_subplot(), f"classifier in {stage}")
        return fig
    low, high = float(EDGES[0]), float(EDGES[-1])  # the open end bins are drawn at their inner edge's width
    for ax, (name, by_source) in zip(fig.subplots(len(report), 1, squeeze=False)[:, 0], report.items()):
        for k, (source, entry) in enumerate(by_source.items()):
            counts = _bin_counts(entry["histogram"])
            share = counts / max(counts.sum(), 1)
            ax.stairs(share, EDGES, label=f"{source} ({entry['scored']:,})", color=f"C{k}")
            for threshold in entry["thresholds"]:
                # 0 keeps everything and 1 almost nothing: drawn at the axis' ends, which a logit axis cannot reach
                ax.axvline(min(max(float(threshold), low), high), color=f"C{k}", linestyle="--", alpha=0.8)
        ax.set_xscale("logit")
        ax.set_xlim(low, high)
        ax.set_xlabel(f"{name}_score (dashed: thresholds)")
        ax.set_ylabel("share of documents")
        ax.set_title(f"classifier {name}: scores per source")
        ax.legend(fontsize="small")
    return fig


def training_curves(output=None) -> Figure:
    """Loss (train and valid), learning rate and gradient norm against step; spikes as red crosses, rollbacks as
    dashed lines. Steps trained again after a rollback start a new line segment."""
    m = training_metrics(output)
    rollbacks = training_events(output, "rollback")
    fig = Figure(figsize=(9, 8), layout="constrained")
    axes = fig.subplots(3, 1, sharex=True)
    for key, ax in zip(("loss", "lr", "grad_norm"), axes):
        for k, seg in enumerate(loss_segments(m["train"])):
            ax.plot([r["step"] for r in seg], [r[key] for r in seg], color="C0", alpha=1.0 if k == 0 else 0.8,
                    label=("train" if key == "loss" else key) if k == 0 else None)
        spikes = m["spikes"]
        if spikes:
            ax.plot([r["step"] for r in spikes], [r[key] for r in spikes], "x", color="red", markersize=9,
                    label="spike" if key == "loss" else None)
        for e in rollbacks:
            ax.axvline(e["step"], color="red", linestyle="--", alpha=0.6,
                       label="rollback" if key == "loss" and e is rollbacks[0] else None)
        ax.set_ylabel(key)
    if m["valid"]:
        axes[0].plot([r["step"] for r in m["valid"]], [r["valid_loss"] for r in m["valid"]], "o-", color="C1",
                     label="valid")
    axes[0].legend()
    axes[0].set_title("training")
    axes[1].ticklabel_format(axis="y", style="sci", scilimits=(-2, 2))
    axes[2].set_yscale("log")
    axes[2].set_xlabel("step")
    return fig
