"""The gateway's progress file (gateway/leases.py): what a live process appends, and what the
process that takes over a dead one's spool makes of it."""

import json
import os
from datetime import UTC, datetime

import orjson
from sluice_client import AuthorizeResult
from sluice_client.aio import AsyncSluiceClient
from sluice_client.leases import Lease
from sluice_client.spool import Spool

from gateway.app import Gateway
from gateway.attempt import Attempt
from gateway.config import GatewayConfig, Upstream
from gateway.leases import GatewayLeases, ProgressLog, progress_path, recover
from tests.aio import run_async
from tests.clients.test_python_client import _dead_url

STARTED = "2026-12-03T12:00:00+00:00"


def lines(*records) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)


def read(path) -> list[dict]:
    with open(path, "rb") as f:
        return [json.loads(x) for x in f.read().splitlines()]


def usage(rid: str, status: str = "completed", output: int = 9) -> dict:
    return {"request_id": rid, "reservation_id": f"rsv_{rid}", "input_tokens": 5,
            "cached_input_tokens": 0, "output_tokens": output, "status": status,
            "started_at": STARTED, "first_token_at": None, "finished_at": STARTED}


def test_a_dead_process_requests_become_interrupted_usage_and_its_finished_ones_are_resent(
        tmp_path):
    spool_path = str(tmp_path / "usage-0.jsonl")
    Spool(spool_path).append([usage("spooled")])  # its usage reached the spool: not again
    with open(progress_path(spool_path), "wb") as f:
        f.write(lines(
            {"a": "streaming", "r": "rsv_s", "i": 40, "s": STARTED},
            {"a": "silent", "r": "rsv_q", "i": 7, "s": STARTED},
            {"a": "done", "r": "rsv_d", "i": 5, "s": STARTED},
            {"a": "spooled", "r": "rsv_spooled", "i": 5, "s": STARTED},
            {"p": "streaming", "o": 120, "t": 1_796_300_000.25},
            {"p": "done", "o": 9, "t": 1_796_300_000.3},
            {"p": "streaming", "o": 480, "t": 1_796_300_000.75},
            {"u": usage("done")},
        ) + b'{"p":"streaming","o":50')  # the write the kill cut short

    assert recover(spool_path) == 3
    assert not os.path.exists(progress_path(spool_path))
    events = {e["request_id"]: e for e in Spool(spool_path).take()}
    assert set(events) == {"spooled", "done", "streaming", "silent"}
    assert events["done"] == usage("done")  # the real event, sent again (idempotent)
    streaming = events["streaming"]
    assert (streaming["status"], streaming["output_tokens"], streaming["input_tokens"],
            streaming["reservation_id"]) == ("interrupted", 480, 40, "rsv_s")
    assert streaming["first_token_at"] == datetime.fromtimestamp(
        1_796_300_000.25, UTC).isoformat()
    assert streaming["finished_at"] == datetime.fromtimestamp(1_796_300_000.75, UTC).isoformat()
    # Admitted, nothing delivered yet: its input is billed, as Sluice's own expiry would.
    assert (events["silent"]["status"], events["silent"]["output_tokens"],
            events["silent"]["input_tokens"]) == ("interrupted", 0, 7)
    assert recover(spool_path) == 0  # nothing left to take over


def test_the_progress_file_is_rewritten_with_only_what_is_live(tmp_path):
    log = ProgressLog(str(tmp_path / "p"), compact_bytes=2_000)
    log.admit("live", b'{"a":"live","r":"rsv_l","i":1,"s":"%s"}\n' % STARTED.encode())
    log.admit("gone", b'{"a":"gone","r":"rsv_g","i":1,"s":"%s"}\n' % STARTED.encode())
    log.finish("gone", b'{"u":' + orjson.dumps(usage("gone")) + b"}\n")
    log.admit("sent", b'{"a":"sent","r":"rsv_x","i":1,"s":"%s"}\n' % STARTED.encode())
    log.finish("sent", b'{"u":' + orjson.dumps(usage("sent")) + b"}\n")
    log.handled(["sent"])
    for n in range(1, 60):
        log.progress("live", b'{"p":"live","o":%d,"t":1.0}\n' % n)
        log.flush()
    records = read(log.path)
    assert log.size < 2_000 and log.size == os.path.getsize(log.path)
    kinds = [next(iter(r)) + ":" + str(r.get("a") or r.get("p") or r["u"]["request_id"])
             for r in records]
    assert kinds[:3] == ["a:live", "p:live", "u:gone"], kinds
    assert "a:sent" not in kinds and "u:sent" not in kinds  # its usage left memory
    log.close(remove=True)
    assert os.path.exists(log.path)  # a request is still in flight: kept for a successor


def _leased_gateway() -> Gateway:
    return Gateway(GatewayConfig(sluice_url=_dead_url(), gateway_token="gw_x",
                                 upstreams={"*": Upstream("http://127.0.0.1:1/v1")}))


def _leases_started(gateway: Gateway, spool_path: str) -> GatewayLeases:
    """The gateway's leases on a client with leases (on the loop: the client's tasks start)."""
    gateway.sluice = AsyncSluiceClient(gateway.config.sluice_url, token="gw_x",
                                       spool_path=spool_path, leases=True)
    leases = GatewayLeases(gateway, interval=3600)
    leases.start(spool_path)
    return leases


def _admitted(gateway: Gateway, leases: GatewayLeases, lease_id: str) -> Attempt:
    """An attempt admitted with a lease, held by the client, in flight."""
    attempt = Attempt(operation="chat", model="m", input_estimate=10)
    attempt.grant = AuthorizeResult(allowed=True, status_code=200, reservation_id=lease_id,
                                    lease=Lease(lease_id, 15_000, 5_000))
    gateway.sluice.leases.hold(attempt.grant.lease)
    gateway.in_flight[attempt.request_id] = attempt
    leases.admitted(attempt)
    return attempt


def test_progress_is_appended_where_it_changed_and_handed_to_the_heartbeat(tmp_path):
    gateway = _leased_gateway()
    spool_path = str(tmp_path / "usage-0.jsonl")

    async def run():
        leases = _leases_started(gateway, spool_path)
        attempts = [_admitted(gateway, leases, f"rsv_{n}") for n in range(3)]
        attempts[0].delivered_tokens = 7
        attempts[1].delivered_tokens = 3
        leases.tick()
        attempts[0].delivered_tokens = 11
        leases.tick()
        leases.tick()  # nothing changed: nothing appended
        await leases.stop()
        return attempts

    attempts = run_async(run())
    records = read(progress_path(spool_path))
    progress = [(r["p"], r["o"]) for r in records if "p" in r]
    a0, a1 = attempts[0].request_id, attempts[1].request_id
    assert progress == [(a0, 7), (a1, 3), (a0, 11)]
    assert sum("a" in r for r in records) == 3
    book = gateway.sluice.leases
    assert [book.held_progress(f"rsv_{n}") for n in range(3)] == [11, 3, 0]


def test_when_the_tick_is_overdue_progress_is_written_before_the_bytes(tmp_path):
    gateway = _leased_gateway()
    spool_path = str(tmp_path / "usage-0.jsonl")

    async def run():
        leases = _leases_started(gateway, spool_path)
        attempt = _admitted(gateway, leases, "rsv_0")
        leases.tick()
        leases.sending(attempt, 8)  # the tick is on time: nothing written ahead
        attempt.delivered_tokens = 8
        leases._ticked -= 7200      # the process was starved: the tick is overdue
        leases.sending(attempt, 80)  # written before the 72 tokens leave
        leases.tick()               # the send has not returned yet: nothing older written
        attempt.delivered_tokens = 80
        leases.tick()
        await leases.stop()
        return attempt.request_id

    rid = run_async(run())
    assert [(r["p"], r["o"]) for r in read(progress_path(spool_path)) if "p" in r] == [(rid, 80)]
