"""Leases (hook contract §1): the bookkeeping both clients share.

A client made with `leases=True` asks `authorize` for a lease. An admitted request then holds
one: a reservation with a short TTL that the client renews in the background, one heartbeat
call per process per interval naming every lease the process holds with its progress (output
tokens delivered so far). When the stream ends the gateway calls `release(lease_id,
delivered)`: releases that come together within `RELEASE_WINDOW` leave in one call, at once,
whatever the usage batch does. An `authorize` made while releases are queued sends them first
and waits for their answer, so a slot freed before a caller saw its stream end is free for
that caller's next request.

`LeaseBook` holds what is in flight; it has no I/O. The clients (client.py, aio.py) drive it.
"""

import logging
import os
import threading
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger("sluice_client")

HEARTBEAT_PATH = "/api/gateway/v1/leases/heartbeat"
RELEASE_PATH = "/api/gateway/v1/leases/release"
MAX_PER_CALL = 1000          # leases one heartbeat or release call may name (the contract's)
RELEASE_WINDOW = 0.005       # seconds a release waits for others ending with it
DEFAULT_HEARTBEAT = 5.0      # seconds, until an answer names the interval
ASK_AGAIN = 3                # concurrency refusals asked again after pending releases
NEAR_LIMIT = 2               # requests left (the key's last answer) below which releases go first
KEYS_MAX = 50_000            # keys whose last remaining-requests count is kept

_process: tuple[int, str] | None = None


def process_id() -> str:
    """This process's `gateway_process`: a uuid4 hex, new in a forked child (a child holds
    none of its parent's leases, and must not renew them)."""
    global _process
    pid = os.getpid()
    if _process is None or _process[0] != pid:
        _process = (pid, uuid.uuid4().hex)
    return _process[1]


@dataclass(frozen=True)
class Lease:
    id: str
    ttl_ms: int
    heartbeat_ms: int

    @classmethod
    def from_answer(cls, raw) -> "Lease | None":
        if not isinstance(raw, dict) or not isinstance(raw.get("id"), str):
            return None
        return cls(raw["id"], int(raw.get("ttl_ms") or 0),
                   int(raw.get("heartbeat_ms") or DEFAULT_HEARTBEAT * 1000))


class LeaseBook:
    """The leases this process holds (id -> [progress, bound]) and the releases waiting to
    leave (id -> progress). Thread-safe: the sync client's request threads, heartbeat thread
    and release thread all use it.

    `on_refused(kind, lease_id, code)` is called for every lease an answer refuses (kind
    "heartbeat" or "release"; the gateway meters them); the lease is dropped from the
    heartbeat either way."""

    def __init__(self, *, on_refused: Callable[[str, str, str], None] | None = None):
        self._held: dict[str, list[int]] = {}
        self._releasing: dict[str, int] = {}
        self._lock = threading.Lock()
        self.on_refused = on_refused
        self.interval = DEFAULT_HEARTBEAT
        self.stats: Counter = Counter()   # heartbeat_calls, renewed, refused, released, ...
        # hash(api key) -> requests it had left at its last answer (x-ratelimit-remaining-
        # requests): whether an authorize waits for the releases pending.
        self._remaining: dict[int, int] = {}

    def near_limit(self, api_key: str) -> bool:
        return self._remaining.get(hash(api_key), NEAR_LIMIT + 1) <= NEAR_LIMIT

    def answered_authorize(self, api_key: str, result) -> None:
        if result.error_code == "concurrency_exceeded":
            remaining = 0
        else:
            try:
                remaining = int((result.headers or {})["x-ratelimit-remaining-requests"])
            except (KeyError, ValueError, TypeError):
                return
        if len(self._remaining) >= KEYS_MAX:
            self._remaining.clear()  # a hint, not a record
        self._remaining[hash(api_key)] = remaining

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, lease_id: str) -> bool:
        return lease_id in self._held

    @property
    def releasing(self) -> bool:
        return bool(self._releasing)

    def hold(self, lease: Lease, *, bound: int = 0) -> None:
        """An admitted request's lease; `bound` its reserved output tokens (0: none known).
        Progress beyond it is sent as the bound: Sluice refuses more, and would drop the
        lease for it."""
        with self._lock:
            self._held[lease.id] = [0, bound]
            self.interval = max(lease.heartbeat_ms, 1) / 1000

    def progress(self, lease_id: str, delivered: int) -> None:
        entry = self._held.get(lease_id)
        if entry is not None and delivered > entry[0]:
            entry[0] = min(delivered, entry[1]) if entry[1] else delivered

    def held_progress(self, lease_id: str) -> int | None:
        entry = self._held.get(lease_id)
        return None if entry is None else entry[0]

    def release(self, lease_id: str, delivered: int | None = None) -> bool:
        """Stop renewing the lease and queue its release. False when the process does not
        hold it (released already, refused, or never a lease)."""
        with self._lock:
            entry = self._held.pop(lease_id, None)
            if entry is None:
                return False
            if delivered is not None and delivered > entry[0]:
                entry[0] = min(delivered, entry[1]) if entry[1] else delivered
            self._releasing[lease_id] = entry[0]
            return True

    def renewals(self, process: str) -> list[dict]:
        """The heartbeat's bodies: every lease held, MAX_PER_CALL a call."""
        with self._lock:
            items = [{"id": k, "delivered_output_tokens": v[0]} for k, v in self._held.items()]
        return _bodies(process, items)

    def releases_return(self, body: dict) -> None:
        """A release body that did not reach Sluice: queued again (a release queued since for
        the same lease keeps its own count)."""
        with self._lock:
            for item in body["leases"]:
                self._releasing.setdefault(item["id"], item["delivered_output_tokens"])

    @property
    def releasing_count(self) -> int:
        return len(self._releasing)

    def releases_take(self, process: str) -> list[dict]:
        """The release bodies of everything queued (now no longer queued)."""
        with self._lock:
            taken, self._releasing = self._releasing, {}
        return _bodies(process, [{"id": k, "delivered_output_tokens": v}
                                 for k, v in taken.items()])

    def answered(self, answer: dict, *, kind: str) -> None:
        """A heartbeat's (kind "heartbeat") or release's ("release") answer: the leases it
        refused are dropped and counted, and logged."""
        results = answer.get("leases") if isinstance(answer, dict) else None
        if not isinstance(results, list):
            logger.warning("sluice answered a lease %s without results: %r", kind, answer)
            return
        ok = "renewed" if kind == "heartbeat" else "released"
        for result in results:
            if not isinstance(result, dict):
                continue
            if result.get("status") == ok:
                self.stats[ok] += 1
                continue
            lease_id, code = str(result.get("id")), str(result.get("code"))
            self.stats[f"{kind}_refused"] += 1
            with self._lock:
                self._held.pop(lease_id, None)
            logger.warning("sluice refused the %s of lease %s: %s (%s)", kind, lease_id, code,
                           result.get("message", ""))
            if self.on_refused is not None:
                self.on_refused(kind, lease_id, code)


def _bodies(process: str, items: list[dict]) -> list[dict]:
    return [{"gateway_process": process, "leases": items[i:i + MAX_PER_CALL]}
            for i in range(0, len(items), MAX_PER_CALL)]
