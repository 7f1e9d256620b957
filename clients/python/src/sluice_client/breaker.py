"""A circuit breaker for calls to Sluice: once Sluice is known to be down, calls fail at once
instead of each waiting through its connect attempts and retries, and a background probe
notices when Sluice is back.

Closed: calls go through. A call that could not *reach* Sluice (connection refused, reset or
timed out, no answer by the call's own deadline, a 5xx that is not a decision) after its
retries opens it. Open: calls fail at once, with no I/O, while a probe asks Sluice every
`probe_interval` seconds; the first answer closes it.

Only reaching Sluice counts, never how long an answer takes: a call still waiting for its
answer is neither a success nor a failure. A request Sluice holds in an admission queue (its
answer may legitimately take its whole wait budget) therefore never opens the breaker, and
its deadline is its own (the budget plus the usual timeout), not the breaker's.
"""

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

logger = logging.getLogger("sluice_client")


class Breaker:
    def __init__(self, *, probe: Callable[[], Awaitable[bool]], probe_interval: float = 0.25):
        self._probe, self.probe_interval = probe, probe_interval
        self.open = False
        self._prober: asyncio.Task | None = None

    def succeeded(self) -> None:
        """Sluice answered a call."""
        if self.open:
            self._close()

    def failed(self) -> None:
        """A call could not reach Sluice, after its retries."""
        if self.open:
            return
        logger.warning("Sluice cannot be reached: answering at once until a probe succeeds")
        self.open = True
        if self._prober is None or self._prober.done():
            self._prober = asyncio.get_running_loop().create_task(self._probe_until_up(),
                                                                  name="sluice-probe")

    async def stop(self) -> None:
        if self._prober is not None:
            self._prober.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._prober
            self._prober = None

    def _close(self) -> None:
        logger.warning("Sluice answers again")
        self.open = False

    async def _probe_until_up(self) -> None:
        while self.open:
            await asyncio.sleep(self.probe_interval)
            try:
                up = await self._probe()
            except Exception:  # a probe that breaks says "not yet", like one that fails
                up = False
            if up and self.open:
                self._close()
