"""docs/tokenize.md's Megatron snippet, run as written (the run folder replaced): one weight per file, its token
count from tokens.json, and a prefix whose .bin/.idx exist, for every file of each split."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from tests.loader.tokens import labelled_docs, write_dataset

REPO = Path(__file__).resolve().parents[2]


def test_the_megatron_weights_snippet(tmp_path):
    rng = np.random.default_rng(0)
    folder = tmp_path / "run" / "tokenize"
    for split in ("train", "valid"):
        write_dataset(folder, {"web": labelled_docs(9, rng), "books": labelled_docs(4, rng, 500)}, files_per_source=3,
                      split=split)
    text = (REPO / "docs" / "tokenize.md").read_text(encoding="utf-8")
    code = re.search(r"## Megatron-LM\n.*?```python\n(.*?)```", text, re.S).group(1)
    assert "build/demo/run" in code
    namespace: dict = {}
    exec(compile(code.replace("build/demo/run", str(tmp_path / "run")), "docs/tokenize.md", "exec"), namespace)
    # The last split's values remain in the namespace: valid.
    index = namespace["index"]
    assert namespace["weights"] == [f["tokens"] for f in index.splits["valid"]["files"]] and len(namespace["weights"]) == 6
    for weight, prefix in zip(namespace["weights"], namespace["prefixes"]):
        assert Path(prefix + ".bin").stat().st_size == 2 * weight and Path(prefix + ".idx").is_file()
    words = namespace["data_path"].split()
    assert words[0::2] == [str(w) for w in namespace["weights"]] and words[1::2] == namespace["prefixes"]
