"""What a gateway token the hook does not know may cost: a flood of guessed `gw_` tokens must
not become a flood of PostgreSQL queries (nor of Redis calls).

A token missing from the process's copy of the set (quotas/hook/gateway_tokens.py) is, in order:

1. refused from memory when it was found unknown less than MISS_SECONDS ago (a negative entry
   keyed by its digest, at most MISS_MAX_ENTRIES of them), or when this process has no lookup
   left in its budget (LOOKUPS_PER_SECOND, LOOKUP_BURST: a token bucket);
2. looked up in Redis, one HMGET of its digest. The publish that follows a token's creation
   writes Redis before the creation returns, so a new token works at once, before the process
   reads the set again (within REFRESH_SECONDS). While a flood spends the budget, a new token
   waits for that read instead;
3. looked up in PostgreSQL only when Redis does not list it (a publish may have been lost) or
   cannot answer, and then by reading the whole set of usable tokens at most once per
   DB_READ_EVERY_SECONDS per process, whoever asks and whatever they present: one read answers
   for every token. A usable token found there is published again.

Per process, not in Redis: the cache exists to spare round trips, and one kept in Redis would
cost one per guess. It needs no invalidation when a token is created: an entry is keyed by the
digest of a string someone presented, and a token's secret is drawn at its creation, so no entry
can be older than its token; and the set the process holds is always asked first. The bound is
per process, not per peer: it holds for any number of peers (or addresses of one), and the hook
does not need to know who is asking.
"""

import contextlib
import threading
import time

from django.db import DatabaseError
from prometheus_client import Counter

from quotas.limiter.connection import LimiterUnavailable
from quotas.limiter.gateway_tokens import gateway_token_read, gateway_tokens_write
from quotas.publish import gateway_tokens_usable

MISS_SECONDS = 5.0
MISS_MAX_ENTRIES = 10_000
LOOKUPS_PER_SECOND = 20.0
LOOKUP_BURST = 20
DB_READ_EVERY_SECONDS = 5.0

MISSES = Counter("sluice_gateway_token_misses_total",
                 "Gateway tokens presented that the process's set did not hold, by where the "
                 "answer came from (memory: refused without a lookup).", ["answered_from"])


class UnknownTokens:
    def __init__(self) -> None:
        self.misses: dict[str, float] = {}  # digest -> unknown until (monotonic)
        self.lookups = float(LOOKUP_BURST)  # lookups left in the budget
        self.lookups_at = time.monotonic()
        self.db_read_after = float("-inf")
        self.lock = threading.Lock()

    def refused_from_memory(self, digest: str) -> bool:
        """True when `resolve` would answer None without a lookup (no budget is spent)."""
        refused = (self.misses.get(digest, float("-inf")) > time.monotonic()
                   or self._budget() < 1)
        if refused:
            MISSES.labels("memory").inc()
        return refused

    def resolve(self, digest: str) -> str | None:
        """The entry ("<id>:<name>") of a usable token the process's set does not hold, or
        None. May read Redis or PostgreSQL, within the bounds above."""
        if self.refused_from_memory(digest):
            return None
        if not self._take():  # another thread took the last lookup meanwhile
            MISSES.labels("memory").inc()
            return None
        try:
            entry = gateway_token_read(digest)
        except LimiterUnavailable:
            entry = None
        if entry is not None:
            MISSES.labels("redis").inc()
            return entry
        # Listed in Redis or not, PostgreSQL may know it (a publish lost, Redis flushed or down).
        read_db = self._db_read_due()
        entry = self._from_postgresql(digest) if read_db else None
        MISSES.labels("postgresql" if read_db else "redis").inc()
        if entry is None:
            self._remember(digest)
        return entry

    def _budget(self) -> float:
        now = time.monotonic()
        return min(LOOKUP_BURST, self.lookups + (now - self.lookups_at) * LOOKUPS_PER_SECOND)

    def _take(self) -> bool:
        with self.lock:
            left = self._budget()
            self.lookups, self.lookups_at = left - (left >= 1), time.monotonic()
            return left >= 1

    def _db_read_due(self) -> bool:
        with self.lock:
            now = time.monotonic()
            if now < self.db_read_after:
                return False
            self.db_read_after = now + DB_READ_EVERY_SECONDS
            return True

    def _from_postgresql(self, digest: str) -> str | None:
        try:
            tokens = gateway_tokens_usable()
        except DatabaseError:
            return None
        entry = tokens.get(digest)
        if entry is not None:  # usable, and Redis did not list it: its publish was lost
            with contextlib.suppress(LimiterUnavailable):
                gateway_tokens_write(tokens)
        return entry

    def _remember(self, digest: str) -> None:
        if len(self.misses) >= MISS_MAX_ENTRIES:
            now = time.monotonic()
            self.misses = {d: until for d, until in self.misses.items() if until > now}
            if len(self.misses) >= MISS_MAX_ENTRIES:
                self.misses.clear()
        self.misses[digest] = time.monotonic() + MISS_SECONDS
