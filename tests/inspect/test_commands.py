"""`tokenmill inspect`: its arguments, printed samples, and user errors."""

from __future__ import annotations

import pytest

from tokenmill.cli import build_parser
from tokenmill.errors import TokenmillError
from tokenmill.inspect import samples

pytestmark = pytest.mark.ray


def _parse(argv):
    return build_parser().parse_args(argv)


def test_defaults_and_dropped_without_a_reason():
    args = _parse(["inspect"])
    assert (args.run, args.stage, args.source, args.n, args.seed, args.dropped) == (None, "clean", None, 5, 0, None)
    assert _parse(["inspect", "RUN", "--dropped"]).dropped is True  # any reason
    assert _parse(["inspect", "RUN", "--dropped", "too_few_words"]).dropped == "too_few_words"


def test_prints_the_sampled_documents(small_run, capsys):
    args = _parse(["inspect", str(small_run), "--stage", "clean", "--source", "reddit", "-n", "3", "--chars", "60"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "3 random kept documents of clean, source reddit (seed 0)" in out
    for r in samples(small_run, "clean", source="reddit", n=3):
        assert r["id"] in out


def test_prints_dropped_documents_with_their_reason(small_run, capsys):
    reason = samples(small_run, "clean", n=1, dropped=True)[0]["drop_reason"]
    args = _parse(["inspect", str(small_run), "--dropped", reason, "-n", "1"])
    assert args.func(args) == 0
    assert reason in capsys.readouterr().out


def test_text_with_brackets_is_printed_as_text(small_run, capsys):
    # Documents hold Markdown links and "[deleted]"; they must not be read as rich markup.
    args = _parse(["inspect", str(small_run), "--source", "reddit", "-n", "40", "--chars", "100000"])
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert any("[" in r["text"] and r["text"].split("[", 1)[1][:10] in out
               for r in samples(small_run, "clean", source="reddit", n=40))


@pytest.mark.parametrize("argv, match", [
    (["--stage", "nope"], "no stage 'nope'"),
    (["--source", "nope"], "source 'nope'"),
    (["--dropped", "nope"], "reasons: "),
])
def test_user_errors_raise_tokenmill_error(small_run, argv, match):
    args = _parse(["inspect", str(small_run), *argv])
    with pytest.raises(TokenmillError, match=match):
        args.func(args)
