"""Start a local Ray cluster bound to 127.0.0.1 (dashboard off), or join an existing one."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import Iterator

log = logging.getLogger(__name__)


def _local_only_env() -> None:
    # Ray picks its node address when it is imported: with this flag off it uses the loopback
    # address, and its gRPC servers then bind 127.0.0.1 instead of every interface.
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if "ray" in sys.modules:
        from ray._private import ray_constants

        ray_constants.ENABLE_RAY_CLUSTER = False


RAY_ADDRESS_ENV = "RAY_ADDRESS"
"""Ray's own variable naming a cluster to join: the default of `--ray-address` and `execution.ray_address`."""


@contextlib.contextmanager
def _sigterm_kept() -> Iterator[None]:
    """Put back the process's SIGTERM handler once Ray has started: `ray.init` installs its C++ failure handler for
    SIGTERM, which prints a stack of every thread and aborts (exit 134), so a `kill` would never reach the CLI's
    handler (one line, Ray shut down, the run folder's lock released, exit 143) nor Python's default (exit 143)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    try:
        yield
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def start_local(num_cpus: int | None = None) -> None:
    """Start a private Ray instance on this machine, reachable only from it.

    Interrupted (Ctrl-C) half way, it shuts down what it had started before the interrupt goes on.
    """
    _local_only_env()
    import ray

    try:
        with _sigterm_kept():
            _init_local(ray, num_cpus)
    except BaseException:
        with contextlib.suppress(Exception):
            ray.shutdown()
        raise


def _init_local(ray, num_cpus: int | None) -> None:
    ray.init(
        address="local",  # a new instance, whatever RAY_ADDRESS says (`ray_session` reads it first)
        num_cpus=num_cpus or os.cpu_count(),
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
        logging_level=logging.WARNING,
        configure_logging=False,
    )
    address = ray.util.get_node_ip_address()
    if address not in ("127.0.0.1", "::1", "localhost"):
        log.warning("Ray node address is %s, not loopback: its ports may be reachable from the network", address)


@contextlib.contextmanager
def ray_session(address: str | None = None, num_cpus: int | None = None) -> Iterator[None]:
    """Use the Ray already initialised in this process, else join `address` (else the cluster `RAY_ADDRESS` names,
    as `ray job submit` and a KubeRay head pod set it), else start a local cluster.

    Only a cluster started here is shut down on exit.
    """
    import ray

    if ray.is_initialized():
        yield
        return
    reaper = None
    if not address and os.environ.get(RAY_ADDRESS_ENV):
        address = os.environ[RAY_ADDRESS_ENV]
        log.info("joining the Ray cluster at %s (from %s)", address, RAY_ADDRESS_ENV)
    if address:
        if _is_loopback(address):
            # Else Ray rewrites 127.0.0.1 into this machine's outbound address and looks for the cluster there.
            _local_only_env()
        with _sigterm_kept():
            ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING, configure_logging=False)
    else:
        reaper = Reaper.start()  # before Ray: a Ctrl-C or SIGKILL inside ray.init leaves helpers too
        try:
            start_local(num_cpus)
        except BaseException:
            if reaper is not None:
                reaper.stop()
            raise
    try:
        yield
    finally:
        try:
            ray.shutdown()
        finally:
            if reaper is not None:
                reaper.stop()


def _is_loopback(address: str) -> bool:
    host = address.removeprefix("ray://").rsplit(":", 1)[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


def cluster_cpus() -> int:
    import ray

    return max(1, int(ray.cluster_resources().get("CPU", 1)))


REAP_GRACE_S = 2.0
"""Seconds between SIGTERM and SIGKILL for a Ray helper the reaper ends."""


class Reaper:
    """A small process that ends the Ray helpers of a local cluster once the driver is gone.

    Ray ties the processes the driver starts (GCS, raylet, log monitor) to it with PR_SET_PDEATHSIG, so a SIGKILLed
    driver takes them along; but the raylet's own children, the dashboard agent and the runtime-env agent, each with
    a port open on 127.0.0.1, notice the raylet's death and then wait about 60 s trying to report it to the GCS
    that died with it (measured on Ray 2.60: 60-65 s). The reaper, started before `ray.init` in its own session (so
    the terminal's Ctrl-C does not reach it), notes every Ray process descended from the driver while the driver
    lives, and reads a pipe only the driver holds; at end of file (the driver exited, however it died) it sends
    SIGTERM to those still alive, then SIGKILL after `REAP_GRACE_S`. A process is recognised by pid and start time,
    so a reused pid is never signalled. Nothing is left when the reaper itself is SIGKILLed too (then Ray's 60 s
    apply, `docs/cluster.md`).
    """

    def __init__(self, process) -> None:
        self.process = process

    @classmethod
    def start(cls) -> "Reaper | None":
        import subprocess
        import time

        import ray

        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH"))
                                                           if p)}
        code = "import sys; from tokenmill.pipeline.ray_cluster import reap; reap(*sys.argv[1:])"
        try:
            process = subprocess.Popen(
                [sys.executable, "-c", code, str(os.getpid()), repr(time.time() - 1.0),
                 os.path.dirname(os.path.abspath(ray.__file__))],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                start_new_session=True, close_fds=True, env=env,
            )
        except OSError as err:
            log.warning("cannot start the Ray helper reaper (%s): a killed driver may leave Ray's agents listening "
                        "on 127.0.0.1 for about a minute", err)
            return None
        return cls(process)

    def stop(self) -> None:
        """After a clean shutdown: close the pipe; the reaper ends what Ray left and exits."""
        if self.process.stdin is None:
            return
        with contextlib.suppress(OSError):
            self.process.stdin.close()
        try:
            self.process.wait(timeout=REAP_GRACE_S + 3)
        except Exception:  # noqa: BLE001 - never hold up the driver's exit for the reaper
            log.warning("the Ray helper reaper (pid %d) did not exit", self.process.pid)


def reap(driver: str, since: str, ray_dir: str) -> None:
    """The reaper's body (`Reaper`): track Ray processes under `driver` created after `since`; end them at EOF."""
    import select
    import signal

    import psutil

    driver_pid, started = int(driver), float(since)
    tracked: dict[int, float] = {}

    def is_ray(proc) -> bool:
        try:
            return any(ray_dir in part for part in proc.cmdline()[:3]) or proc.name().startswith("ray::")
        except psutil.Error:
            return False

    def refresh() -> None:
        try:
            children = psutil.Process(driver_pid).children()
        except psutil.Error:
            children = []
        roots = [c for c in children if c.pid != os.getpid() and is_ray(c)]
        roots += _alive(tracked)
        for proc in roots:
            try:
                for p in [proc, *proc.children(recursive=True)]:
                    created = p.create_time()
                    if created >= started:
                        tracked.setdefault(p.pid, created)
            except psutil.Error:
                continue

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        refresh()
        ready, _, _ = select.select([sys.stdin], [], [], 0.5)
        if ready and not os.read(sys.stdin.fileno(), 4096):
            break
    left = _alive(tracked)
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(signal.SIGTERM)
    _, still = psutil.wait_procs(left, timeout=REAP_GRACE_S)
    for proc in still:
        with contextlib.suppress(psutil.Error):
            proc.kill()


def _alive(tracked: dict[int, float]) -> list:
    """The tracked processes still running, each the very process noted (same pid and start time)."""
    import psutil

    out = []
    for pid, created in tracked.items():
        try:
            proc = psutil.Process(pid)
            if proc.create_time() == created and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc)
        except psutil.Error:
            continue
    return out
