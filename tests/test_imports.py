"""What the command line imports before any work: `--help` of an auditor's command loads no stage and no datatrove."""

from __future__ import annotations

import subprocess
import sys


def _imported(*argv: str) -> list[str]:
    """The modules `python -X importtime -m tokenmill.cli ARGV` imports, from its import-time report on stderr."""
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "tokenmill.cli", *argv], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "usage: tokenmill" in result.stdout
    lines = [line for line in result.stderr.splitlines() if line.startswith("import time:")]
    assert lines, "no -X importtime report on stderr"
    return [line.rsplit("|", 1)[1].strip() for line in lines]


def test_manifest_diff_help_imports_no_stage_and_no_datatrove():
    modules = _imported("manifest", "diff", "--help")
    assert "tokenmill.cli" in modules or "tokenmill" in modules
    assert [m for m in modules if m == "datatrove" or m.startswith("datatrove.")] == []
    assert [m for m in modules if m == "tokenmill.stages" or m.startswith("tokenmill.stages.")] == []


def test_the_auditors_tools_import_no_stage():
    """`manifest diff` and `show` read manifests: importing them loads neither the stages nor datatrove."""
    code = ("import sys, tokenmill.manifests.commands, tokenmill.manifests.diff, tokenmill.manifests.show, "
            "tokenmill.manifests.golden, tokenmill.json_diff; "
            "print(sorted(m for m in sys.modules if m.startswith(('tokenmill.stages', 'datatrove'))))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"


def test_building_the_parser_imports_no_command_body():
    """The argparse wiring names the commands; their bodies (and pyarrow, Ray, torch under them) load when run."""
    heavy = ("pyarrow", "ray", "torch", "numpy", "tokenmill.pipeline", "tokenmill.inspect", "tokenmill.manifests")
    modules = _imported("--help")
    assert [m for m in modules if m.split(".")[0] in heavy or m.startswith(heavy)] == []


def test_manifest_diff_of_two_runs_imports_no_stage(tmp_path):
    """Running `manifest diff` orders the stages from the manifests' lineage, not from the stage registry."""
    import json

    totals = {"docs_in": 1, "docs_out": 1, "bytes_in": 5, "bytes_out": 5}
    for run in ("a", "b"):
        for stage, read in (("sample", {"stage": "ingest", "manifest_hash": "h"}), ("ingest", {"files": []})):
            content = {"stage": stage, "config_hash": "c", "input": read, "schema_version": 2, "config": {"seed": 1},
                       "totals": totals, "by_source": {}, "shards": []}
            (tmp_path / run / stage).mkdir(parents=True)
            (tmp_path / run / stage / "manifest.json").write_text(json.dumps({"content": content, "run_info": {}}))
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "tokenmill.cli", "manifest", "diff",
                             str(tmp_path / "a"), str(tmp_path / "b"), "--json"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    diff = json.loads(result.stdout)
    assert diff["identical"] and [s["stage"] for s in diff["stages"]] == ["ingest", "sample"]
    modules = [line.rsplit("|", 1)[1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")]
    assert "tokenmill.manifests.diff" in modules
    assert [m for m in modules if m.startswith(("tokenmill.stages", "datatrove"))] == []
