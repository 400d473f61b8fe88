"""Normalization: ftfy repairs mojibake only; our own steps do NFC, whitespace and width, each counted and optional."""

from __future__ import annotations

import unicodedata

import pytest

from tokenmill.text.normalize import NormalizeConfig, normalize, normalize_whitespace, whitespace_layout

ALL = NormalizeConfig()


def test_ftfy_repairs_mojibake():
    text, steps = normalize("CafÃ© au lait â€” naÃ¯ve rÃ©sumÃ©", ALL)
    assert text == "Café au lait — naïve résumé" and steps == ["ftfy"]


@pytest.mark.parametrize("kept", [
    "AT&amp;T and &lt;b&gt; stay for the escape step",
    "“curly quotes” and ‘single’ ones stay",
    "中文标点，保留！（全角括号）【书名号】",
    "ligatures ﬁ stay",
])
def test_ftfy_leaves_other_decisions_to_our_steps(kept):
    text, steps = normalize(kept, NormalizeConfig(nfc=False, whitespace=False, fullwidth=False))
    assert text == kept and steps == []


def test_nfc():
    decomposed = unicodedata.normalize("NFD", "élève")
    text, steps = normalize(decomposed, ALL)
    assert text == "élève" and steps == ["nfc"]


@pytest.mark.parametrize("raw, clean", [
    ("a\r\nb\rc", "a\nb\nc"),
    ("tabs\tand   runs  of spaces", "tabs and runs of spaces"),
    ("trailing   \nspaces  ", "trailing\nspaces"),
    ("one\n\n\n\n\n\ntwo", "one\n\n\ntwo"),
    ("zero\u200bwidth\ufeff and\u00a0no-break\u202fspaces", "zerowidth and no-break spaces"),
    ("bell\x07 and escape\x1b removed, NEL\u0085breaks", "bell and escape removed, NEL\nbreaks"),
    ("emoji 👩\u200d💻 keeps its joiner", "emoji 👩\u200d💻 keeps its joiner"),
    ("  \n  leading blank lines  \n", "leading blank lines"),
])
def test_whitespace_as_opt_did_for_the_pile(raw, clean):
    assert normalize_whitespace(raw) == clean


def test_fullwidth_letters_and_digits_fold_cjk_punctuation_stays():
    text, steps = normalize("ＧＤＰ增长５．２％，“稳中向好”。", ALL)
    assert text == "GDP增长5．2％，“稳中向好”。" and steps == ["fullwidth"]


def test_each_step_can_be_turned_off():
    raw = "CafÃ©\t\tＡＢ"
    assert normalize(raw, NormalizeConfig(ftfy=False, nfc=False, whitespace=False, fullwidth=False)) == (raw, [])
    assert normalize(raw, ALL) == ("Café AB", ["ftfy", "whitespace", "fullwidth"])


# --- code keeps its whitespace (issue 16, item 3) ---------------------------------------------------------------

ANSWER = """I tried this, and the loop never ends:

```python
def drain(queue):
\twhile queue:   # tab-indented on purpose
        item  =  queue.pop()
```

Then I read   the docs.\tThey say to write it like this:

    for item in reversed(queue):
        handle(item)      # aligned
        log(item)         # comments

which    works."""


def test_prose_keeps_fenced_and_indented_code_blocks_and_collapses_its_own_runs():
    out, kept = whitespace_layout(ANSWER, "blocks")
    assert kept == "blocks"
    fenced = ANSWER[ANSWER.index("```python"):ANSWER.index("```\n\nThen") + 3]
    indented = ANSWER[ANSWER.index("    for item"):ANSWER.index("\n\nwhich")]
    assert fenced in out and indented in out  # byte for byte: tabs, indentation, aligned comments
    assert "Then I read the docs. They say to write it like this:" in out
    assert out.endswith("\n\nwhich works.")
    # `detect`: this short answer is code by content as a whole; under a page of prose, its blocks are.
    assert whitespace_layout(ANSWER, "detect") == (ANSWER, "document")
    page = "\n".join(f"Paragraph {i} of  a long page about queues." for i in range(80)) + "\n\n" + ANSWER
    out, kept = whitespace_layout(page, "detect")
    assert kept == "blocks" and fenced in out and indented in out and "Paragraph 7 of a long page" in out


def test_indented_block_needs_no_blank_line_before_it():
    """Code pasted under its sentence (StackExchange, web pages) is kept; Markdown would call it a paragraph."""
    text = "I wrote:\n    if  x:\n        y = 1   # one\nand it  fails."
    assert normalize_whitespace(text) == "I wrote:\n    if  x:\n        y = 1   # one\nand it fails."


@pytest.mark.parametrize("text, kept", [
    ("~~~~\ncode  with\truns\n~~~\nstill  code\n~~~~\nprose  again",
     "~~~~\ncode  with\truns\n~~~\nstill  code\n~~~~\nprose again"),  # a shorter fence does not close
    ("```\nunclosed  fence runs\tto the end", "```\nunclosed  fence runs\tto the end"),
    ("``` a`b\nnot  a fence", "``` a`b\nnot a fence"),  # a backtick fence's info string holds no backtick
    ("#define BPF_JMP32\t0x06\t/* jmp mode */\nprose  here",
     "#define BPF_JMP32\t0x06\t/* jmp mode */\nprose here"),
])
def test_fences_and_directives(text, kept):
    assert normalize_whitespace(text) == kept


def test_prose_keeps_indentation_but_not_inner_runs_nor_blank_runs():
    text = "  First line.\n  Second  line\twith  runs.\n\n\n\n\n  Third."
    assert normalize_whitespace(text) == "First line.\n  Second line with runs.\n\n\n  Third."


def test_code_documents_keep_blank_runs_tabs_form_feeds_and_indentation_of_the_first_line():
    code = "    x = 1\n\n\n\n\n\f\ndef f():\n\treturn  x  \r\n"
    assert normalize_whitespace(code, "document") == "    x = 1\n\n\n\n\n\f\ndef f():\n\treturn  x"


def test_code_mode_picks_where_code_is():
    python = ("import os\n\n\ndef main(argv):\n    if  len(argv) > 1:\n        return  os.getcwd()\n"
              "    return None\n")
    assert whitespace_layout(python, "detect") == (python.rstrip("\n"), "document")  # code by content
    assert whitespace_layout(python, "blocks") == (python.rstrip("\n"), "blocks")  # its indented lines are a block
    off = whitespace_layout(python, "off")
    assert off == ("import os\n\n\ndef main(argv):\n    if len(argv) > 1:\n        return os.getcwd()\n"
                   "    return None", None)


def test_web_code_indented_with_no_break_spaces_becomes_spaces_one_for_one():
    text = "<div>\n\u00a0\u00a0\u00a0\u00a0<label>\n\u00a0 \u00a0 \u00a0 \u00a0 <input>\n</div>"
    assert normalize_whitespace(text, "document") == "<div>\n    <label>\n        <input>\n</div>"


def test_the_code_kept_is_named_apart_from_the_steps_that_changed_the_text():
    from tokenmill.text.normalize import normalize_with_layout

    assert normalize_with_layout(ANSWER, NormalizeConfig(code="blocks"))[1:] == (["whitespace"], "code_layout:blocks")
    code = "def f(x):\n    return  x"
    assert normalize_with_layout(code, NormalizeConfig(code="document")) == (code, [], "code_layout:document")
    assert normalize(code, NormalizeConfig(code="document")) == (code, [])  # clean_steps: nothing changed


def test_code_layout_errors_names_lost_indentation_and_tabs():
    from tokenmill.text.layout_check import code_layout_errors

    before = "all:\n\tcc -o a a.c\r\nclean:\n\trm  -f a   \n"
    assert code_layout_errors(before, normalize_whitespace(before, "document")) == []
    assert code_layout_errors(before, "all:\n cc -o a a.c\nclean:\n rm -f a") == [
        "line 2: '\\tcc -o a a.c' became ' cc -o a a.c'", "line 4: '\\trm  -f a   ' became ' rm -f a'"]
    assert code_layout_errors(before, "all:\n\tcc -o a a.c") == ["4 non-blank lines before, 2 after"]


def test_normalize_override_is_validated_naming_the_key(tmp_path):
    from tokenmill.errors import ConfigError
    from tokenmill.pipeline.config import parse_config

    (tmp_path / "a.jsonl").write_text('{"text": "x"}\n')
    config = {"output": "o", "sources": [{"name": "pile", "format": "jsonl", "paths": ["a.jsonl"]}],
              "stages": {"clean": {"overrides": [{"source": "pile", "subset": "Github",
                                                  "normalize": {"tabs": False}}]}}}
    with pytest.raises(ConfigError, match=r"stages\.clean\.overrides\[0\]\.normalize\.tabs"):
        parse_config(config, tmp_path)
    config["stages"]["clean"]["overrides"][0]["normalize"] = {"code": "sometimes"}
    with pytest.raises(ConfigError, match=r"stages\.clean\.overrides\[0\]\.normalize\.code"):
        parse_config(config, tmp_path)
    config["stages"]["clean"]["overrides"][0]["normalize"] = {"code": "document"}
    clean = parse_config(config, tmp_path).stages.clean
    assert clean.overrides[0].normalize.code == "document"


def _whitespace_strings(n: int) -> list[str]:
    import random

    rng = random.Random(7)
    return ["".join(rng.choice(" \t\n\fab") for _ in range(rng.randint(0, 9))) for _ in range(n)]


def test_substring_tests_answer_as_the_regexes_they_replace():
    """The whitespace step asks `in` where it asked a regex (most prose has none of it): the same answers."""
    import re

    from tokenmill.text import normalize as n

    layout = re.compile(r"\t|  |\f|\n\n\n\n|\A(?:[ \t]*\n)*[ \t]")  # the regex `_has_layout` replaces
    texts = _whitespace_strings(50_000)
    assert [n._has_layout(t) for t in texts] == [layout.search(t) is not None for t in texts]
    for chars in (" \t", " \t\f"):
        trailing = re.compile(f"[{chars}]+$", re.M)
        assert [n._has_trailing(t, chars) for t in texts] == [trailing.search(t) is not None for t in texts]
    assert sum(map(n._has_layout, texts)) > 10_000 and sum(not n._has_layout(t) for t in texts) > 5_000


def test_ascii_scans_answer_as_the_regexes_they_replace():
    """An ASCII text is looked through by `bytes.translate` instead of the table's regexes: for every ASCII
    character, and for texts mixing them, the same answer and the same unified text."""
    import random

    from tokenmill.text import normalize as n

    for c in map(chr, range(128)):
        text = f"a{c}b"
        assert n._prose_only(text) == (n._PROSE_ONLY.search(text) is not None), repr(c)
        assert n.unify_characters(text) == n._TABLE_CHARACTER.sub(lambda m: n._CHARACTER_STRINGS[m.group()],
                                                                  n._LINE_BREAKS.sub("\n", text)), repr(c)
    rng = random.Random(3)
    texts = ["".join(rng.choice("ab \n\t\r\x00\x07\x0b\x0c\x1c\x1f\x7f") for _ in range(rng.randint(0, 12)))
             for _ in range(20_000)]
    assert [n._prose_only(t) for t in texts] == [n._PROSE_ONLY.search(t) is not None for t in texts]
    slow = [n._TABLE_CHARACTER.sub(lambda m: n._CHARACTER_STRINGS[m.group()], n._LINE_BREAKS.sub("\n", t))
            for t in texts]
    assert [n.unify_characters(t) for t in texts] == slow
    assert 1_000 < sum(map(n._prose_only, texts)) < len(texts) - 1_000


def test_fullwidth_only_where_there_is_some():
    text, steps = normalize("ＡＢＣ１２３ and 全角，标点", ALL)
    assert text == "ABC123 and 全角，标点" and steps == ["fullwidth"]
    assert normalize("全角，标点 only", ALL) == ("全角，标点 only", [])


# --- a document judged code keeps its characters (issue 31, item 7) ---------------------------------------------

CODE_WITH_MOJIBAKE = ("import unittest\n\n\nclass DecodeTest(unittest.TestCase):\n"
                      "    def test_latin1_reads_utf8_as_mojibake(self):\n"
                      "        self.assertEqual(b'\\xc3\\xa9'.decode('latin-1'), 'Ã©')\n"
                      "        self.assertEqual(len('ｗｉｄｔｈ'), 5)\n"
                      "        self.assertEqual(len('" + unicodedata.normalize("NFD", "é") + "'), 2)\n")


@pytest.mark.parametrize("code", ["detect", "document"])
def test_character_steps_skip_a_document_judged_code(code):
    """ftfy, NFC and full-width folding would each change this test module's strings (and fail its asserts):
    judged code, it keeps them, and what the steps would have done is named apart from the changes."""
    assert normalize(CODE_WITH_MOJIBAKE, NormalizeConfig(code=code)) == (CODE_WITH_MOJIBAKE.rstrip("\n"),
                                                                         ["whitespace"])
    from tokenmill.text.normalize import normalize_document

    done = normalize_document(CODE_WITH_MOJIBAKE, NormalizeConfig(code=code))
    assert done.kept == ["code_kept:ftfy", "code_kept:nfc", "code_kept:fullwidth"]
    assert done.counted() == ["whitespace", "code_layout:document", *done.kept]


@pytest.mark.parametrize("code", ["blocks", "off"])
def test_character_steps_still_run_where_no_document_is_code(code):
    """`blocks` and `off` never make a whole document code: a page whose code blocks hold mojibake is a web
    page that was read in the wrong encoding, and is repaired as a whole."""
    text, steps = normalize(CODE_WITH_MOJIBAKE, NormalizeConfig(code=code))
    assert "'é'" in text and "len('width')" in text and steps[:2] == ["ftfy", "nfc"] and "fullwidth" in steps


def test_run_regexes_match_what_the_plain_ones_did():
    """The whitespace step's run regexes start only where a run starts and never backtrack: the same output as the
    plain forms they replace, on every kind of run."""
    import re

    from tokenmill.text import normalize as n

    texts = _whitespace_strings(20_000)
    plain = {"_RUN": re.compile(r"[ \t]*\t[ \t]*| {2,}"), "_TRAILING": re.compile(r"[ \t]+$", re.M),
             "_PROSE_TRAILING": re.compile(r"[ \t\f]+$", re.M)}
    for name, regex in plain.items():
        mine = getattr(n, name)
        assert [[m.span() for m in mine.finditer(t)] for t in texts] == [[m.span() for m in regex.finditer(t)]
                                                                         for t in texts], name


@pytest.mark.timeout(60)
@pytest.mark.parametrize("code", ["detect", "document", "off"])
def test_a_long_run_of_spaces_costs_its_length_not_its_square(code):
    """A hostile document: 300,000 spaces inside a line, code around it. The plain run regexes retried from every
    position of the run (about 15 minutes here); each run is now read once."""
    text = "def f(x):\n    return x  " + " " * 300_000 + "# end\n    y\u00a0 = 1" + " " * 300_000 + "\n" + "z = 2\t\n"
    out, steps = normalize(text, NormalizeConfig(code=code))
    assert out.endswith("z = 2") and "whitespace" in steps
