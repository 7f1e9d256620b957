"""The reference gateway's side of leases (hook contract §1).

Sluice's client (`sluice_client`, made with `leases=True`) holds the leases, renews them in one
heartbeat per process and sends the releases. This module adds what only the gateway knows:

- **Release before the last byte.** A stream that ends (done, upstream error) queues its
  release before its last bytes are written to the client (`ending`), and the client sends
  queued releases before any later authorize: a caller that starts its next request when it
  sees the end of the previous one always finds the slot free. A client that leaves, a whole
  answer, a failure: released when the attempt finishes (`finished`).
- **Progress that survives the process.** Every `interval` (25 ms) the output tokens delivered
  so far by each admitted request, where they changed, are appended to a progress file next to
  the process's usage spool (`<spool>.progress`, JSON lines), and handed to the heartbeat.
  When the append is overdue (a starved process: the upstream's tokens then come in bursts of
  the time it was not running), a stream's progress is appended *before* its bytes are written
  (`sending`), so the burst a kill would cut is on disk already. A
  finished request appends its usage event too, until the usage batch has left memory. A
  process that takes over a dead one's spool (gateway/spools.py) reads that file first
  (`recover`): every request with progress but no usage event becomes a usage event with
  status `interrupted` and the last progress as its output tokens; the usage events found are
  sent again (Sluice acknowledges one it has as a duplicate; a real event replaces an
  `interrupted` one, never the other way round). Both go to the usage spool, which the new
  process replays at once. The file is written, not fsynced: it survives the process, not the
  host.

Records (short keys: the file takes one line per admitted request and per change of
progress):
    {"a": request_id, "r": reservation_id, "i": input_tokens, "s": started_at}   admitted
    {"p": request_id, "o": delivered_output_tokens, "t": unix_time}              progress
    {"u": {usage event}}                                                          finished
"""

import asyncio
import contextlib
import logging
import os
import time
from datetime import UTC, datetime

import orjson
from sluice_client.spool import Spool

logger = logging.getLogger("gateway")

PROGRESS_INTERVAL = 0.025  # seconds between progress appends (the contract asks <= 50 ms;
#   what a crash leaves unbilled is about this much of each stream: half of it on average)
OVERDUE = 1.5  # x interval since the last tick: a stream's progress is appended before its bytes
COMPACT_BYTES = 4 * 2 ** 20  # the progress file is rewritten with only what is live beyond it


def progress_path(spool_path: str) -> str:
    return spool_path + ".progress"


def progress_line(request_id: str, delivered: int, at: float) -> bytes:
    """A progress record (the tick's and an overdue stream's alike)."""
    return b'{"p":"%s","o":%d,"t":%.3f}\n' % (request_id.encode(), delivered, at)


def recover(spool_path: str) -> int:
    """Turn a dead process's progress file into usage events in its usage spool (fsynced),
    then remove it. Returns how many events were spooled."""
    path = progress_path(spool_path)
    try:
        with open(path, "rb") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return 0
    admitted: dict[str, dict] = {}
    progress: dict[str, tuple[int, float, float]] = {}  # id -> (tokens, first t, last t)
    finished: dict[str, dict] = {}
    for line in lines:
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # the last line of a process killed mid-write
        if not isinstance(record, dict):
            continue
        if "a" in record:
            admitted[record["a"]] = record
        elif "p" in record:
            first = progress.get(record["p"], (0, record["t"], 0.0))[1]
            progress[record["p"]] = (int(record["o"]), first, record["t"])
        elif "u" in record and isinstance(record["u"], dict):
            finished[record["u"].get("request_id")] = record["u"]
    spool = Spool(spool_path)
    spooled = _spooled_request_ids(spool)
    events = [e for rid, e in finished.items() if rid not in spooled]
    for rid, a in admitted.items():
        if rid in finished or rid in spooled:
            continue
        tokens, first, last = progress.get(rid, (0, None, None))
        started = a["s"]
        events.append({
            "request_id": rid, "reservation_id": a["r"], "input_tokens": a["i"],
            "cached_input_tokens": 0, "output_tokens": tokens, "status": "interrupted",
            "started_at": started,
            "first_token_at": _iso(first) if tokens else None,
            "finished_at": _iso(last) if tokens else started})
    spool.append(events)
    os.unlink(path)
    if events:
        logger.warning("took over a dead gateway's progress: %d usage events spooled "
                       "(%d interrupted)", len(events), sum(e["status"] == "interrupted"
                                                           for e in events))
    return len(events)


def _spooled_request_ids(spool: Spool) -> set[str]:
    ids = set()
    for p in (spool.path, spool.taking):
        with contextlib.suppress(FileNotFoundError), open(p, "rb") as f:
            for line in f:
                with contextlib.suppress(orjson.JSONDecodeError, AttributeError):
                    ids.add(orjson.loads(line).get("request_id"))
    return ids


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat()


class ProgressLog:
    """The live process's progress file: records buffered, appended every tick, and rewritten
    with only what is still needed once it passes COMPACT_BYTES."""

    def __init__(self, path: str, *, compact_bytes: int = COMPACT_BYTES):
        self.path, self.compact_bytes = path, compact_bytes
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.size = os.fstat(self._fd).st_size
        self._buffer: list[bytes] = []
        # What a rewrite keeps: per request in flight its admission and last progress, and the
        # usage events not yet handled by the usage sender.
        self.admitted: dict[str, bytes] = {}
        self.last: dict[str, bytes] = {}
        self.unhandled: dict[str, bytes] = {}

    def admit(self, request_id: str, line: bytes) -> None:
        self.admitted[request_id] = line
        self._buffer.append(line)

    def progress(self, request_id: str, line: bytes) -> None:
        self.last[request_id] = line
        self._buffer.append(line)

    def finish(self, request_id: str, line: bytes) -> None:
        self.admitted.pop(request_id, None)
        self.last.pop(request_id, None)
        self.unhandled[request_id] = line
        self._buffer.append(line)

    def handled(self, request_ids) -> None:
        for rid in request_ids:
            self.unhandled.pop(rid, None)

    def flush(self) -> None:
        if not self._buffer:
            return
        data = b"".join(self._buffer)
        self._buffer.clear()
        os.write(self._fd, data)
        self.size += len(data)
        if self.size > self.compact_bytes:
            self._rewrite()

    def _rewrite(self) -> None:
        data = b"".join([*self.admitted.values(), *self.last.values(),
                         *self.unhandled.values()])
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, self.path)
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self.size = len(data)

    def close(self, *, remove: bool) -> None:
        """`remove`: every usage event left memory (a clean shutdown): nothing to recover."""
        if remove and not self.unhandled and not self.admitted:
            os.close(self._fd)
            os.unlink(self.path)
            return
        self.flush()
        os.close(self._fd)


class GatewayLeases:
    """The gateway's hooks: `admitted`, `ending`, `finished`, `usage_handled`, and a task that
    appends progress every `interval`."""

    def __init__(self, gateway, *, interval: float = PROGRESS_INTERVAL):
        self.gateway, self.interval = gateway, interval
        self.log: ProgressLog | None = None
        self._logged: dict[str, int] = {}   # request id -> progress last appended
        self._task: asyncio.Task | None = None
        self._ticked = time.monotonic()      # when the last tick appended

    def start(self, spool_path: str) -> int:
        """After the spool is claimed, before the usage sender starts (it replays the spool):
        take over what a dead process left (returns how many usage events that spooled), then
        log this process's progress."""
        recovered = recover(spool_path)
        self.log = ProgressLog(progress_path(spool_path))
        self._task = asyncio.create_task(self._run(), name="gateway-progress")
        return recovered

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def close(self) -> None:
        """After the usage sender has flushed (it calls `usage_handled`)."""
        if self.log is not None:
            self.log.close(remove=True)
            self.log = None

    # --- hooks -------------------------------------------------------------------------------
    def admitted(self, attempt) -> None:
        grant = attempt.grant
        if grant.lease is None or self.log is None:
            return
        self.log.admit(attempt.request_id, orjson.dumps(
            {"a": attempt.request_id, "r": grant.reservation_id, "i": attempt.input_estimate,
             "s": attempt.started_at.isoformat()}) + b"\n")
        self._logged[attempt.request_id] = 0

    def ending(self, attempt, delivered: int) -> None:
        """A stream's last bytes are about to be written: free its slot first."""
        grant = attempt.grant
        if grant is not None and grant.lease is not None:
            self.gateway.sluice.release(grant.lease.id, delivered)

    def sending(self, attempt, delivered: int) -> None:
        """A stream's bytes are about to be written: when the tick is overdue, append this
        stream's progress now (one write; nothing at all when ticks are on time)."""
        if time.monotonic() - self._ticked < OVERDUE * self.interval:
            return
        rid = attempt.request_id
        last = self._logged.get(rid)
        if last is None or delivered <= last or self.log is None:
            return
        self._logged[rid] = delivered
        self.log.progress(rid, progress_line(rid, delivered, time.time()))
        self.log.flush()
        self.gateway.sluice.lease_progress(attempt.grant.lease.id, delivered)

    def finished(self, attempt, event: dict) -> None:
        """`event`: the attempt's usage event (its JSON)."""
        grant = attempt.grant
        if grant is None or grant.lease is None:
            return
        self.gateway.sluice.release(grant.lease.id, attempt.delivered_tokens)
        self._logged.pop(attempt.request_id, None)
        if self.log is not None:
            self.log.finish(attempt.request_id,
                            b'{"u":' + orjson.dumps(event) + b"}\n")

    def usage_handled(self, events: list[dict]) -> None:
        if self.log is not None:
            self.log.handled(e.get("request_id") for e in events)

    # --- progress ----------------------------------------------------------------------------
    def tick(self) -> None:
        log, logged, sluice = self.log, self._logged, self.gateway.sluice
        now = None
        for rid, attempt in self.gateway.in_flight.items():
            last = logged.get(rid)
            if last is None or attempt.delivered_tokens <= last:  # unchanged, or written ahead
                continue
            delivered = logged[rid] = attempt.delivered_tokens
            now = now or time.time()
            log.progress(rid, progress_line(rid, delivered, now))
            sluice.lease_progress(attempt.grant.lease.id, delivered)
        log.flush()
        self._ticked = time.monotonic()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                self.tick()
            except Exception:  # the progress log must survive anything (a full disk...)
                logger.exception("appending the gateway's progress failed")
