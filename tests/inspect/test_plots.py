"""Every plot helper returns a Figure that renders to PNG on a small real run."""

from __future__ import annotations

import io

import pytest

pytestmark = pytest.mark.ray
pytest.importorskip("matplotlib", reason="plots need matplotlib (the notebooks extra)")

from tokenmill.inspect import plots  # noqa: E402


@pytest.mark.parametrize("name, kwargs", [
    ("drop_bars", {"stage": "clean"}),
    ("drop_bars", {"stage": "decontaminate"}),  # nothing dropped: an empty panel, not an error
    ("tokens_per_source", {}),
    ("length_histograms", {"split": "train"}),
    ("cluster_size_bars", {}),
    ("contamination_bars", {}),
])
def test_plot_renders(small_run, name, kwargs):
    fig = getattr(plots, name)(small_run, **kwargs)
    assert fig.axes
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    assert buf.getvalue().startswith(b"\x89PNG")


def test_drop_bars_stack_every_drop(small_run):
    from tokenmill.inspect import drop_counts

    ax = plots.drop_bars(small_run, "clean").axes[0]
    assert sum(p.get_width() for p in ax.patches) == sum(r["docs"] for r in drop_counts(small_run, "clean"))
