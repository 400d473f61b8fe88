"""Listening TCP sockets read from /proc/net (no `ss` needed): (address, port) pairs."""

from __future__ import annotations

import os
import socket
import struct
from pathlib import Path

LISTEN = "0A"


def _decode(hex_addr: str, family: int) -> str:
    raw = bytes.fromhex(hex_addr)
    if family == socket.AF_INET:
        return socket.inet_ntop(family, struct.pack("<I", struct.unpack(">I", raw)[0]))
    words = [struct.pack("<I", struct.unpack(">I", raw[i:i + 4])[0]) for i in range(0, 16, 4)]
    return socket.inet_ntop(family, b"".join(words))


def listening_sockets(inodes: set[str] | None = None) -> set[tuple[str, int]]:
    """Every listening socket, or only those whose socket inode is in ``inodes``."""
    out = set()
    for name, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        path = Path("/proc/net") / name
        if not path.exists():
            continue
        for line in path.read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] != LISTEN or (inodes is not None and fields[9] not in inodes):
                continue
            addr, port = fields[1].split(":")
            out.add((_decode(addr, family), int(port, 16)))
    return out


def is_loopback(address: str) -> bool:
    return address.startswith("127.") or address in ("::1", "::ffff:127.0.0.1") or address.startswith("::ffff:127.")


def listeners(pids) -> set[tuple[str, int]]:
    """Listening TCP sockets (address, port) held by these processes (other tests' clusters left out)."""
    inodes = set()
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    return listening_sockets(inodes)


def group_pids(pgid: int) -> list[int]:
    """The processes of process group ``pgid`` (a driver started with ``start_new_session`` and what it started:
    its Ray cluster), read from /proc."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
        if int(fields[2]) == pgid:
            pids.append(int(entry.name))
    return pids
