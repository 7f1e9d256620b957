"""A Celery worker outlives its broker's failover: the Procfile's worker line, run against a
private Redis that is demoted to a replica (as a failover does to the old primary: its blocked
BRPOP answers "UNBLOCKED ... master -> replica", then every write READONLY), promoted back, and
then restarted. Celery's default treats the first as unrecoverable and exits; the settings'
CELERY_BROKER_CHANNEL_ERROR_RETRY makes it reconnect like after a lost connection.

Each fault strikes an idle worker (its task done and acknowledged). A connection lost while a
task is in flight can still stop the worker: kombu, restoring the unacknowledged message on the
closed connection, raises AttributeError (docs/faults.md, "Redis failover"); that is kombu's,
not this."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kombu import Connection

from config.celery import app
from tests.private_redis import PrivateRedis
from tests.test_procfile import PROCESSES, ROOT


def _until(check, what: str, worker: subprocess.Popen, log: Path) -> None:
    for _ in range(600):
        assert worker.poll() is None, f"the worker exited:\n{log.read_text()[-3000:]}"
        if check():
            return
        time.sleep(0.1)  # waiting for the worker's state, not asserting on time
    pytest.fail(f"timed out waiting for {what}:\n{log.read_text()[-3000:]}")


def _consumers(broker: PrivateRedis) -> int:
    """Clients blocked in BRPOP on the broker: a worker waiting for its queue's messages."""
    return sum(1 for c in broker.client().client_list() if c.get("cmd") == "brpop")


def _task_done(broker: PrivateRedis, worker: subprocess.Popen, log: Path) -> None:
    """A task sent to the worker through `broker`, received and finished (succeeded, or raised
    for want of a database: either way the worker consumed it and acknowledged it)."""
    with Connection(broker.url) as connection:
        task_id = app.send_task("quotas.tasks.limiter_sync", queue="maintenance",
                                connection=connection).id
    _until(lambda: f"[{task_id}] succeeded" in log.read_text()
           or f"[{task_id}] raised" in log.read_text(), "the task", worker, log)


@pytest.mark.filterwarnings("ignore::celery.exceptions.AlwaysEagerIgnored")  # send_task: real
def test_a_worker_reconnects_after_its_broker_is_demoted_and_after_a_restart(tmp_path):
    broker = PrivateRedis(tmp_path / "broker").start()
    elsewhere = PrivateRedis(tmp_path / "new-primary").start()
    log = tmp_path / "worker.log"
    env = {**os.environ, "REDIS_URL": broker.url,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    with log.open("w") as out:
        worker = subprocess.Popen(  # noqa: S603 - the Procfile's own line
            ["/bin/sh", "-c", f"exec {PROCESSES['worker-maintenance']}"], cwd=ROOT, env=env,
            stdout=out, stderr=subprocess.STDOUT)
    try:
        _until(lambda: _consumers(broker) > 0, "the worker to consume", worker, log)

        broker.replica_of(elsewhere)  # demoted: the worker's BRPOP is unblocked with an error
        _until(lambda: "Connection to broker lost" in log.read_text(), "the worker to notice",
               worker, log)
        broker.client().replicaof("NO", "ONE")  # promoted again
        _until(lambda: _consumers(broker) > 0, "the worker to consume again", worker, log)
        _task_done(broker, worker, log)

        broker.stop()  # and restarted, empty, on the same port
        broker = PrivateRedis(tmp_path / "broker", port=broker.port).start()
        _until(lambda: _consumers(broker) > 0, "the worker after a restart", worker, log)
        _task_done(broker, worker, log)
    finally:
        worker.terminate()
        worker.wait(30)
        broker.stop()
        elsewhere.stop()
