"""Every stage on a real two-node Ray cluster on this machine (`ray start --head` + `ray start --address`),
driven by `tokenmill run --ray-address`: both nodes run tasks, every port is on 127.0.0.1, the bytes equal a
single-node run; then the second node is killed mid-stage and the rerun completes on the survivor."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from tests.cluster.nodes import LocalCluster
from tests.netstat import is_loopback, listeners
from tests.pipeline.test_runner import run_into, tree

# Two Ray nodes started by `ray start`, a run across them, one killed: about two minutes, so in `make test-slow`.
pytestmark = [pytest.mark.ray, pytest.mark.slow]

CLI = [sys.executable, "-m", "tokenmill"]
# A dead node is declared dead after ~1.5 s instead of Ray's default ~15 s (period 3 s, 5 failures).
FAST_NODE_DEATH = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500,
                   "health_check_timeout_ms": 1000, "health_check_failure_threshold": 3}


def small_demo(root: Path) -> Path:
    """The demo corpus (every source format, every stage) at 30 documents per source, shards of 15."""
    from tokenmill.demo import write_demo_corpus

    write_demo_corpus(root, docs_per_source=30)
    data = yaml.safe_load((root / "demo.yaml").read_text())
    data["ingest"]["docs_per_shard"] = 15
    data["stages"]["tokenize"]["tokenizer"]["train"] = {"vocab_size": 512, "sample_docs": 200}
    (root / "demo.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    return root / "demo.yaml"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, ray_cluster):
    """The corpus and its single-node reference run (on the session's local cluster, in this process)."""
    root = tmp_path_factory.mktemp("multinode")
    config = small_demo(root / "corpus")
    run_into(config, root / "reference")
    return config, root


@pytest.fixture(scope="module")
def cluster():
    # A short folder of its own, not the test's: a node's socket paths (`<temp>/session_<time>_<pid>/sockets/
    # plasma_store`) must fit AF_UNIX's 107 bytes, and pytest-xdist's workers nest tmp_path one level deeper.
    with tempfile.TemporaryDirectory(prefix="tm-ray-") as root:
        cluster = LocalCluster(Path(root))
        try:
            cluster.start_head(FAST_NODE_DEATH)
            cluster.wait_for(alive=1)
            cluster.add_node("second", {"second": 1})
            cluster.wait_for(alive=2)
            yield cluster
        finally:
            cluster.stop()


def with_output(config: Path, output: Path) -> Path:
    data = yaml.safe_load(config.read_text())
    data["output"] = str(output)
    path = config.parent / f"{output.name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_cli(cluster: LocalCluster, config: Path, delay: float = 0.0, **popen) -> subprocess.Popen:
    env = {**cluster.env, "TOKENMILL_TASK_DELAY_S": str(delay)}
    # As from a plain shell: `tokenmill run` itself must keep a 127.0.0.1 address on loopback (ray_cluster.py).
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
    return subprocess.Popen([*CLI, "run", str(config), "--ray-address", cluster.address, "--workers", "2"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def kill_mid_stage(driver: subprocess.Popen, node, commits: Path, at_least: int = 2) -> int:
    """SIGKILL `node` once `at_least` tasks of the phase are committed and the node is running one; returns
    how many were committed then. Listeners of the cluster and driver seen meanwhile go to `node.seen`."""
    deadline = time.time() + 150
    while not (len(list(commits.glob("*.json"))) >= at_least and node.task_processes()):
        if driver.poll() is not None:
            raise AssertionError(f"the run ended before the kill:\n{driver.communicate()[1][-3000:]}")
        assert time.time() < deadline, f"no task of {commits} ran on {node.name}"
        time.sleep(0.02)
    node.kill()
    return len(list(commits.glob("*.json")))


def test_every_stage_runs_across_both_nodes_and_survives_losing_one(cluster, corpus):
    """Ray reruns the tasks lost with a node on the survivor (`execution.max_retries`), in the same run."""
    config, root = corpus
    head, second = cluster.nodes
    driver = run_cli(cluster, with_output(config, root / "two_nodes"), delay=0.05)
    try:
        seen = listeners([p for n in cluster.nodes for p in n.pids()] + [driver.pid])
        ran = {n.name: n.tasks_started() for n in cluster.nodes}
        assert ran["second"] == 0
        kill_mid_stage(driver, second, root / "two_nodes" / "dedup" / "_work" / "commits" / "signatures")
        ran = {n.name: n.tasks_started() for n in cluster.nodes}
        while driver.poll() is None:
            seen |= listeners(head.pids() + [driver.pid])
            time.sleep(0.2)
        out, err = driver.communicate()
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode == 0, err[-3000:]
    # Ingest, sample and clean ran their tasks on both nodes before the second one died in dedup.
    assert ran["head"] >= 10 and ran["second"] >= 10, f"tasks started per node: {ran}"
    assert [n["alive"] for n in cluster.describe()].count(True) == 1
    assert tree(root / "two_nodes") == tree(root / "reference")

    assert seen, "saw no listener of the cluster"
    public = sorted(s for s in seen if not is_loopback(s[0]))
    assert not public, f"the two-node cluster listens beyond 127.0.0.1: {public}"


def test_node_killed_mid_stage_then_rerun_completes_on_the_survivor(cluster, corpus):
    """With no retries left the lost task fails the stage by name; the rerun resumes it on the survivor."""
    config, root = corpus
    doomed = cluster.add_node("third", {"third": 1})
    cluster.wait_for(alive=len([n for n in cluster.nodes if n.alive()]))
    run_config = with_output(config, root / "killed")
    data = yaml.safe_load(run_config.read_text())
    data["execution"] = {"max_retries": 0}  # execution options are never part of a stage's identity
    run_config.write_text(yaml.safe_dump(data, sort_keys=False))
    commits = root / "killed" / "clean" / "_work" / "commits" / "map"

    driver = run_cli(cluster, run_config, delay=0.1)
    try:
        kill_mid_stage(driver, doomed, commits)
        out, err = driver.communicate(timeout=240)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert driver.returncode != 0 and "clean" in err, err[-3000:]
    assert not (root / "killed" / "clean" / "manifest.json").exists()
    committed = len(list(commits.glob("*.json")))

    rerun = run_cli(cluster, run_config)
    out, err = rerun.communicate(timeout=240)
    assert rerun.returncode == 0, err[-3000:]
    assert not doomed.alive() and not doomed.pids()
    clean = json.loads((root / "killed" / "clean" / "manifest.json").read_text())["run_info"]
    assert clean["tasks_skipped"] == committed and clean["tasks_run"] > 0
    assert tree(root / "killed") == tree(root / "reference")
