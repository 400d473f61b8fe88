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


def start_local(num_cpus: int | None = None) -> None:
    """Start a private Ray instance on this machine, reachable only from it."""
    _local_only_env()
    import ray

    ray.init(
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
    """Use the Ray already initialised in this process, else join `address`, else start a local cluster.

    Only a cluster started here is shut down on exit.
    """
    import ray

    if ray.is_initialized():
        yield
        return
    if address:
        if _is_loopback(address):
            # Else Ray rewrites 127.0.0.1 into this machine's outbound address and looks for the cluster there.
            _local_only_env()
        ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING, configure_logging=False)
    else:
        start_local(num_cpus)
    try:
        yield
    finally:
        ray.shutdown()


def _is_loopback(address: str) -> bool:
    host = address.removeprefix("ray://").rsplit(":", 1)[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


def cluster_cpus() -> int:
    import ray

    return max(1, int(ray.cluster_resources().get("CPU", 1)))
