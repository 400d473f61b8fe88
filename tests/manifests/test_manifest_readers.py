"""Every tool reads a stage manifest through its one reader (`pipeline.manifest.read_manifest`): one edited to name
a shard outside its stage folder is refused, naming the file, by the golden manifests, `tokenmill.inspect`,
`report contamination` and `manifest diff`, before any shard is opened."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tokenmill.errors import ManifestError


def _run(tmp_path: Path) -> tuple[Path, Path]:
    """A run folder whose clean and decontaminate manifests name `outside/x.parquet`, a real Parquet file beside
    the run folder (what an edited manifest would make a reader open)."""
    outside = tmp_path / "outside" / "x.parquet"
    outside.parent.mkdir()
    pq.write_table(pa.table({"id": ["secret"], "text": ["not the run's"]}), outside)
    run = tmp_path / "run"
    for stage in ("clean", "decontaminate"):
        (run / stage).mkdir(parents=True)
        totals = {"docs_in": 1, "docs_out": 1, "bytes_in": 13, "bytes_out": 13, "drops": {}}
        content = {"stage": stage, "input": {"stage": "sample", "manifest_hash": "h"}, "config": {}, "totals": totals,
                   "by_source": {"web": {**totals, "subsets": {}}}, "report": {"evalsets": {}},
                   "shards": [{"path": "../../outside/x.parquet", "dropped_path": None, "source": "web", **totals}]}
        (run / stage / "manifest.json").write_text(json.dumps({"content": content, "run_info": {}}))
    return run, outside


def test_an_edited_manifest_is_refused_by_every_reader(tmp_path, capsys):
    from tokenmill.cli import main
    from tokenmill.inspect.runs import manifest
    from tokenmill.manifests import golden
    from tokenmill.manifests.diff import locate

    run, _ = _run(tmp_path)
    where = str(run / "clean" / "manifest.json")
    for read in (lambda: golden.extract(run), lambda: manifest(run, "clean"), lambda: locate(str(run / "clean")),
                 lambda: locate(where)):
        with pytest.raises(ManifestError, match="outside the run folder") as err:
            read()
        assert "manifest.json" in str(err.value)
    assert main(["report", "contamination", str(run)]) == 2
    err = "".join(capsys.readouterr().err.split())  # rich wraps the message
    assert "decontaminate/manifest.json" in err and "outsidetherunfolder" in err
