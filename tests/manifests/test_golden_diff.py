"""Golden manifests' differences as lines: types count, a drop reason left out is 0, lists of another length are one
line, kept and dropped ids get their own lines."""

from __future__ import annotations

from tokenmill.manifests.golden import diff, ids_digest


def _stage(**changes):
    ids = ["a", "b"]
    content = {
        "config": {"min_words": 5, "rules": [{"name": "r1", "on": True}, {"name": "r2", "on": True}]},
        "totals": {"docs_in": 3, "docs_out": 2, "drops": {"too_short": 1}},
        "by_source": {"web": {"docs_in": 3, "drops": {"too_short": 1},
                              "kept_ids": {"count": 2, "sha256": ids_digest(ids)},
                              "dropped_ids": {"too_short": {"count": 1, "sha256": ids_digest(["c"]), "ids": ["c"]}}}},
    }
    for path, value in changes.items():
        node = content
        *parents, last = path.split("__")
        for p in parents:
            node = node[p]
        node[last] = value
    return {"clean": content}


def test_lines_for_values_types_and_lists():
    old = _stage()
    assert diff(old, _stage()) == []
    new = _stage(config__min_words=5.0, config__rules=[{"name": "r1", "on": False}, {"name": "r2", "on": True}])
    assert diff(old, new) == ["clean: config.min_words: 5 -> 5.0", "clean: config.rules[0].on: true -> false"]
    new = _stage(config__rules=[{"name": "r1", "on": True}], config__added={"k": 1})
    assert diff(old, new) == ["clean: config.added: added {\"k\": 1}",
                              "clean: config.rules: 2 -> 1 items ([{\"name\": \"r1\", \"on\": true}, {\"name\": "
                              "\"r2\", \"on\": true}] -> [{\"name\": \"r1\", \"on\": true}])"]
    new = _stage(config__min_words=None)
    del new["clean"]["config"]["rules"]
    assert diff(old, new) == ["clean: config.min_words: 5 -> null",
                              "clean: config.rules: removed (was [{\"name\": \"r1\", \"on\": true}, {\"name\": \"r2\", "
                              "\"on\": true}])"]


def test_a_drop_reason_left_out_counts_as_zero():
    old = _stage()
    assert diff(old, _stage(totals__drops={"too_short": 1, "too_long": 0})) == []
    assert diff(old, _stage(totals__drops={"too_long": 2})) == ["clean: totals.drops.too_long: 0 -> 2",
                                                                "clean: totals.drops.too_short: 1 -> 0"]
    assert diff(old, _stage(totals__other={"too_long": 0})) == ["clean: totals.other: added {\"too_long\": 0}"]


def test_ids_get_their_own_lines():
    old = _stage()
    new = _stage()
    new["clean"]["by_source"]["web"]["dropped_ids"]["too_short"] = {"count": 1, "sha256": ids_digest(["d"]),
                                                                    "ids": ["d"]}
    (line,) = diff(old, new)
    assert line.startswith("clean: dropped ids of web for too_short changed (hash ")
    assert line.endswith("1 -> 1 docs; 1 added, 1 removed; added: d; removed: c)")
    assert diff({}, old) == ["clean: new stage (no golden manifest)"]
