"""A real two-node Ray cluster on this machine, every port on 127.0.0.1, started with `ray start`.

Each node is one `ray start --block` process in its own process group, with its own temp dir: stopping a
node kills that group and nothing else (never `ray stop`, which kills every Ray process on the machine).

On Linux `ray start --address` refuses to start a second node when `RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`, and
with it on, Ray rewrites 127.0.0.1 (in `--address` and `--node-ip-address`) into the machine's outbound address,
so the node would bind every interface and look for the head where it does not listen. The second node is
therefore started by the unmodified `ray start` command run through `_RAY_START`, which only keeps loopback
addresses as given. A fresh token (`RAY_AUTH_TOKEN`) authenticates the nodes and the driver to each other,
independent of any `~/.ray/auth_token` on the machine.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

RAY = str(Path(sys.executable).with_name("ray"))

_RAY_START = (
    "import sys\n"
    "from ray._private import services\n"
    "services.resolve_ip_for_localhost = lambda host: host  # keep 127.0.0.1 as given\n"
    "from ray.scripts.scripts import main\n"
    "sys.argv[0] = 'ray'\n"
    "main()\n"
)

_PROBE = (
    "import json, logging, ray\n"
    "ray.init(address=__import__('sys').argv[1], log_to_driver=False, logging_level=logging.ERROR)\n"
    "print(json.dumps([{'id': n['NodeID'], 'ip': n['NodeManagerAddress'], 'alive': n['Alive'],\n"
    "                   'resources': n['Resources']} for n in ray.nodes()]))\n"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Node:
    name: str
    proc: subprocess.Popen
    temp_dir: Path
    log: Path

    def alive(self) -> bool:
        return self.proc.poll() is None

    def pids(self) -> list[int]:
        """Every process of this node: its process group (`ray start --block` and the daemons it spawned)
        and their descendants (Ray's workers each call setsid, so they leave the group)."""
        table = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            table[int(stat.parent.name)] = (int(fields[1]), int(fields[2]))  # (parent, process group)
        mine = {pid for pid, (_, group) in table.items() if group == self.proc.pid}
        grew = True
        while grew:
            more = {pid for pid, (parent, _) in table.items() if parent in mine} - mine
            mine |= more
            grew = bool(more)
        return sorted(mine)

    def task_processes(self) -> list[int]:
        """Workers of this node running a tokenmill task now (Ray sets the title `ray::execute_task`)."""
        out = []
        for pid in self.pids():
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::execute_task"):
                    out.append(pid)
            except OSError:
                pass
        return out

    def tasks_started(self) -> int:
        """Tasks this node's workers started, from Ray's per-worker logs (one `:task_name:` line per task)."""
        n = 0
        for path in self.temp_dir.glob("session_*/logs/worker-*.out"):
            try:
                n += path.read_text(errors="replace").count(":task_name:execute_task")
            except OSError:
                pass
        return n

    def kill(self) -> None:
        """SIGKILL the whole node (as a lost machine): only the processes of this node, by pid."""
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait(timeout=30)


@dataclass
class LocalCluster:
    """A head node and added nodes, each `--num-cpus 1`; `env` is what a driver needs to join it."""

    root: Path
    port: int = field(default_factory=free_port)
    nodes: list[Node] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.env = {
            **os.environ,
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(32),
            # Loopback everywhere (see the module docstring); the second node turns it back on for itself.
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        }
        # This test process may have joined the session cluster; a driver started from it must not inherit that.
        for var in ("RAY_ADDRESS", "RAY_JOB_ID", "RAY_RAYLET_PID"):
            self.env.pop(var, None)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _start(self, name: str, argv: list[str], env: dict[str, str]) -> Node:
        temp_dir = self.root / name
        temp_dir.mkdir(parents=True, exist_ok=True)
        log = self.root / f"{name}.log"
        common = ["--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--temp-dir", str(temp_dir),
                  "--disable-usage-stats", "--block", "--include-log-monitor", "false"]
        with open(log, "wb") as out:
            proc = subprocess.Popen([*argv, *common], env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, cwd=self.root)
        node = Node(name, proc, temp_dir, log)
        self.nodes.append(node)
        return node

    def start_head(self, system_config: dict | None = None) -> Node:
        argv = [RAY, "start", "--head", "--port", str(self.port), "--include-dashboard=false"]
        if system_config:
            argv += ["--system-config", json.dumps(system_config)]
        return self._start("head", argv, self.env)

    def add_node(self, name: str, resources: dict[str, float]) -> Node:
        env = {**self.env, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"}
        argv = [sys.executable, "-c", _RAY_START, "start", "--address", self.address,
                "--resources", json.dumps(resources)]
        return self._start(name, argv, env)

    def describe(self) -> list[dict]:
        """The cluster's nodes as its GCS sees them, from a short-lived driver."""
        result = subprocess.run([sys.executable, "-c", _PROBE, self.address], env=self.env, capture_output=True,
                                text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"cannot reach the cluster at {self.address}:\n{result.stderr[-3000:]}")
        return json.loads(result.stdout.strip().splitlines()[-1])

    def wait_for(self, alive: int, timeout: float = 90) -> list[dict]:
        deadline = time.time() + timeout
        while True:
            for node in self.nodes:
                if not node.alive() and node.proc.returncode not in (None, -signal.SIGKILL):
                    raise RuntimeError(f"Ray node {node.name} exited:\n{node.log.read_text()[-3000:]}")
            try:
                nodes = self.describe()
            except RuntimeError:
                if time.time() > deadline:
                    raise
                nodes = []
            if sum(n["alive"] for n in nodes) == alive:
                return nodes
            if time.time() > deadline:
                raise RuntimeError(f"expected {alive} live Ray nodes, have {nodes}")
            time.sleep(1)

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.kill()
