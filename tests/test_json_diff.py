"""The one JSON diff: dotted keys, list indices, alignment of inserted elements, flattening as config files name keys."""

from __future__ import annotations

from tokenmill.json_diff import MISSING, changes, flat_changes, flatten


def test_changes_name_the_key_and_list_element():
    old = {"seed": 1, "sources": [{"name": "a", "fraction": 0.5}, {"name": "b", "fraction": 1.0}]}
    new = {"seed": 1, "sources": [{"name": "a", "fraction": 0.4}, {"name": "b", "fraction": 1.0}], "extra": [1]}
    assert list(changes(old, new)) == [("extra", MISSING, [1]), ("sources[0].fraction", 0.5, 0.4)]
    assert list(changes(old, old)) == []


def test_an_inserted_or_removed_element_is_one_change_under_its_index():
    rows = [{"n": i} for i in range(6)]
    inserted = rows[:2] + [{"n": 99}] + rows[2:]
    assert list(changes(rows, inserted, "r")) == [("r[2]", MISSING, {"n": 99})]
    assert list(changes(rows, rows[:3] + rows[4:], "r")) == [("r[3]", {"n": 3}, MISSING)]
    # a replaced element: what changed inside it, under its new index
    assert list(changes(rows, rows[:1] + [{"n": 7}] + rows[3:], "r")) == [("r[1].n", 1, 7), ("r[2]", {"n": 2}, MISSING)]
    assert list(changes(rows, inserted, "r", lists="whole")) == [("r", rows, inserted)]


def test_strict_types_and_absent_defaults():
    assert list(changes({"x": 1}, {"x": 1.0})) == []
    assert list(changes({"x": 1}, {"x": 1.0}, strict=True)) == [("x", 1, 1.0)]

    def zero_drops(path):
        return 0 if path.endswith("drops") else MISSING

    old, new = {"drops": {"short": 0, "long": 3}}, {"drops": {"long": 4, "new": 0}}
    assert list(changes(old, new, absent=zero_drops)) == [("drops.long", 3, 4)]
    assert ("drops.new", MISSING, 0) in list(changes(old, new))


def test_flatten_keeps_plain_lists_and_empty_dicts_whole():
    value = {"a": {"b": 1, "empty": {}}, "thresholds": [1, 2], "overrides": [{"source": "x", "keep": [3]}]}
    assert flatten(value, "stages.clean") == {"stages.clean.a.b": 1, "stages.clean.a.empty": {},
                                              "stages.clean.thresholds": [1, 2],
                                              "stages.clean.overrides[0].source": "x",
                                              "stages.clean.overrides[0].keep": [3]}
    assert flatten({"k": None}) == {"k": None}


def test_flat_changes_sorted_with_missing_sides():
    a, b = {"x": 1, "y": [1], "z": None}, {"y": [1, 2], "z": None, "w": 0}
    assert list(flat_changes(a, b)) == [("w", MISSING, 0), ("x", 1, MISSING), ("y", [1], [1, 2])]
