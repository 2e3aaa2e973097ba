"""A second "host" on this machine: a network namespace joined to the host by a veth pair.

The namespace's only way out is its veth link to a host-side address of a private
/30 (``10.213.R.0/30``, R random per run): the host side is ``.1``, the namespace
``.2``. Nothing is routed beyond the pair, so traffic never leaves this machine.
``cut()`` takes the host end of the link down (a partition: packets are dropped,
TCP connections stall and retransmit) and ``heal()`` brings it back.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import uuid


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)


class NetNs:
    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:6]
        self.name = f"pgq-{tag}"
        self.host_if = f"pgqh{tag}"
        self.ns_if = f"pgqn{tag}"
        subnet = random.randrange(256)
        self.host_addr = f"10.213.{subnet}.1"
        self.ns_addr = f"10.213.{subnet}.2"
        self.cidr = f"10.213.{subnet}.0/30"
        self.created = False

    @staticmethod
    def unavailable() -> str | None:
        """Why a namespace cannot be made here, or None when it can."""
        if shutil.which("ip") is None:
            return "the ip command is missing (apt-get install iproute2)"
        if os.geteuid() != 0:
            return "network namespaces need root"
        probe = f"pgq-probe-{uuid.uuid4().hex[:4]}"
        made = _ip("netns", "add", probe)
        if made.returncode != 0:
            return f"ip netns add failed: {made.stderr.strip()}"
        _ip("netns", "del", probe)
        return None

    def create(self) -> NetNs:
        steps = [
            ("netns", "add", self.name),
            ("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if),
            ("link", "set", self.ns_if, "netns", self.name),
            ("addr", "add", f"{self.host_addr}/30", "dev", self.host_if),
            ("link", "set", self.host_if, "up"),
            ("-n", self.name, "addr", "add", f"{self.ns_addr}/30", "dev", self.ns_if),
            ("-n", self.name, "link", "set", self.ns_if, "up"),
            ("-n", self.name, "link", "set", "lo", "up"),
        ]
        self.created = True
        for step in steps:
            done = _ip(*step)
            if done.returncode != 0:
                self.cleanup()
                raise RuntimeError(f"ip {' '.join(step)} failed: {done.stderr.strip()}")
        return self

    def prefix(self) -> list[str]:
        """Command prefix that runs a program inside the namespace."""
        return ["ip", "netns", "exec", self.name]

    def cut(self) -> None:
        _ip("link", "set", self.host_if, "down")

    def heal(self) -> None:
        _ip("link", "set", self.host_if, "up")

    def cleanup(self) -> None:
        if self.created:
            _ip("netns", "del", self.name)  # takes its end of the pair, and so the pair
            _ip("link", "del", self.host_if)
            self.created = False

    def __enter__(self) -> NetNs:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()
