"""The Procfile (the production layout, docs/deploying.md): every Celery queue has a worker
consuming it, there is exactly one beat, and every command names something that exists and
parses its arguments as the program itself would."""

import importlib.util
import os
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from celery.bin.base import CLIContext
from celery.bin.celery import celery as celery_cli
from django.conf import settings
from django.core.management import get_commands
from honcho.environ import parse_procfile

from config.celery import app

ROOT = Path(__file__).resolve().parent.parent
PROCESSES = parse_procfile((ROOT / "Procfile").read_text()).processes


def _argv(command: str) -> list[str]:
    """The program's argv: a leading `exec` and VAR=value assignments are the shell's."""
    argv = shlex.split(command)
    while argv and (argv[0] == "exec" or re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", argv[0])):
        argv.pop(0)
    return argv


def _celery_context(argv: list[str]):
    """(subcommand name, its parsed parameters), parsed by Celery's own command line."""
    assert argv[:5] == ["python", "-m", "celery", "-A", "config"], argv
    group = celery_cli.make_context("celery", argv[3:6])
    group.obj = CLIContext(app=app, no_color=True, workdir=None, quiet=True)
    name = argv[5]
    command = celery_cli.get_command(group, name)
    assert command is not None, f"celery has no command {name!r}"
    return name, command.make_context(name, argv[6:], parent=group).params


def _celery_processes() -> dict[str, tuple[str, dict]]:
    return {name: _celery_context(_argv(command)) for name, command in PROCESSES.items()
            if _argv(command)[:3] == ["python", "-m", "celery"]}


def test_every_queue_has_a_worker_of_its_own():
    declared = {queue.name for queue in settings.CELERY_TASK_QUEUES}
    routed = {route["queue"] for route in settings.CELERY_TASK_ROUTES.values()}
    consumed: dict[str, list[str]] = {}
    for name, (command, params) in _celery_processes().items():
        if command == "worker":
            # A worker without -Q would consume every queue: production keeps them apart.
            assert params["queues"], f"{name} has no -Q"
            for queue in params["queues"]:
                consumed.setdefault(queue, []).append(name)
    assert routed | {settings.CELERY_TASK_DEFAULT_QUEUE} <= declared
    assert set(consumed) == declared, f"consumed {sorted(consumed)}, declared {sorted(declared)}"
    assert all(len(workers) == 1 for workers in consumed.values()), consumed


def test_exactly_one_beat():
    beats = [name for name, (command, _) in _celery_processes().items() if command == "beat"]
    assert beats == ["beat"]


def test_every_command_names_something_that_exists():
    known = {"web", "hook", "beat"} | {f"worker-{q.name}" for q in settings.CELERY_TASK_QUEUES}
    assert set(PROCESSES) <= known | {"gateway"}, set(PROCESSES) - known
    assert {"web", "hook", "beat"} <= set(PROCESSES)
    for name, command in PROCESSES.items():
        argv = _argv(command)
        assert argv[0] == "python", f"{name}: run with the environment's python"
        if argv[1:3] == ["-m", "celery"]:
            _celery_context(argv)  # raises on an unknown command or option
        elif argv[1] == "-m":
            spec = importlib.util.find_spec(argv[2])
            assert spec is not None, f"{name}: no module {argv[2]}"
            if spec.submodule_search_locations:  # a package runs its __main__
                assert importlib.util.find_spec(f"{argv[2]}.__main__"), name
        elif argv[1] == "manage.py":
            assert argv[2] in get_commands(), f"{name}: no management command {argv[2]}"
        else:
            pytest.fail(f"{name}: unexpected command {command!r}")


@pytest.mark.parametrize("name", ["web", "hook"])
def test_the_web_servers_bind_the_port_given(name):
    argv = _argv(PROCESSES[name])
    assert argv[:3] == ["python", "-m", "config.serve"]
    assert argv[argv.index("--bind") + 1] == "0.0.0.0:$PORT"


def test_the_web_line_starts_a_server_whose_metrics_sum_its_workers():
    """Run as the Procfile says (a shell, PORT from the process manager), with nothing else
    set: the server makes its own multiprocess metrics directory, so /metrics is the sum of
    every worker, not whichever worker answered."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    env |= {"PORT": str(port), "SLUICE_WEB_CONCURRENCY": "2",
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"}
    server = subprocess.Popen(  # noqa: S603 - the Procfile's own line
        ["/bin/sh", "-c", f"exec {PROCESSES['web']}"], cwd=ROOT, env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        _get_when_up(f"{base}/healthz", server)
        for _ in range(20):  # each on a connection of its own: the workers share them
            assert httpx.post(f"{base}/api/gateway/v1/authorize").status_code == 401
        metrics = httpx.get(f"{base}/metrics")
    finally:
        server.terminate()
        server.wait(30)
    assert metrics.status_code == 200
    # The multiprocess collection: every worker's observations, and no per-process collectors
    # (the single process registry has python_info).
    assert "\nsluice_authorize_seconds_count 20.0\n" in metrics.text
    assert "python_info" not in metrics.text


def _get_when_up(url: str, server: subprocess.Popen):
    for _ in range(600):
        assert server.poll() is None, "the server exited"
        try:
            return httpx.get(url, timeout=5)
        except httpx.TransportError:
            time.sleep(0.1)
    pytest.fail("the server did not answer in 60 s")


def test_the_deploying_page_names_every_process():
    page = (ROOT / "docs" / "deploying.md").read_text()
    section = page.split("## Processes", 1)[1].split("\n## ", 1)[0]
    for name in PROCESSES:
        assert f"`{name}`" in section, f"docs/deploying.md's Processes section does not name {name}"
