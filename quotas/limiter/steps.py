"""Decisions written once, run by a thread or by an event loop.

A decision's logic (the engine's, and the hook's around it) is a generator that yields what it
must wait for and gets the answer back:

- `ScriptCall(name, keys, args)`: one of the engine's scripts on the hot client; the reply is
  sent back in, or LimiterUnavailable is thrown in.
- `Blocking(fn, kwargs)`: anything else that may wait or reads PostgreSQL (a pool rebuilt
  after a Redis restart, a fail-open decision, the gateway tokens read again): its return
  value is sent back in, its exception thrown in.
- `Background(fn, kwargs)`: the same kind of work, whose result nobody waits for (a
  heartbeat, a statistic, a cache refreshed for the next requests).
- `Queued(kwargs)`: a decision that may wait for capacity (the admission queue, admission/):
  the runner's `queue(**kwargs)` answers it on an event loop; a runner without one (a thread)
  answers None, and the caller decides at once instead.

`steps_run` does each in the calling thread, as plain calls. `steps_run_async` awaits script
calls on the loop's own pipelined connection (aio.py) and hands the rest to a thread, so that
an event loop can serve authorize without a thread per request and without ever blocking.
"""

import logging
from collections.abc import Awaitable, Callable, Generator, Sequence
from typing import Any, NamedTuple

from quotas.limiter.aio import NeedsThread, script_run_async
from quotas.limiter.connection import script_run

logger = logging.getLogger(__name__)


class ScriptCall(NamedTuple):
    name: str
    keys: Sequence[str]
    args: Sequence


class Blocking(NamedTuple):
    fn: Callable[..., Any]
    kwargs: dict


class Background(NamedTuple):
    fn: Callable[..., Any]
    kwargs: dict


class Claim:
    """Who schedules a refresh: `take(period)` is True the first time it sees `period` (what
    identifies the current period: the time it ends or began), so that one request of the many
    that find a cache stale schedules its refresh, not every one of them."""

    def __init__(self) -> None:
        self.period: object = None

    def take(self, period: object) -> bool:
        if self.period == period:
            return False
        self.period = period
        return True


class Queued(NamedTuple):
    kwargs: dict


Step = ScriptCall | Blocking | Background | Queued
Steps = Generator[Step, Any, Any]
# How a loop runs a callable off the loop: (fn, kwargs) -> an awaitable of its result.
InThread = Callable[[Callable[..., Any], dict], Awaitable[Any]]


def _sync(step: Step) -> Any:
    if type(step) is ScriptCall:
        return script_run(step.name, keys=step.keys, args=step.args)
    if type(step) is Queued:  # a thread does not wait for capacity
        return None
    if type(step) is Background:
        try:
            step.fn(**step.kwargs)
        except Exception:  # nobody waits for it: it must not fail the decision
            logger.exception("background step %s failed", step.fn.__qualname__)
        return None
    return step.fn(**step.kwargs)


_DONE = object()


def _next(steps: Steps, answer: Any, error: Exception | None) -> tuple[Any, Any]:
    """(the next step, None), or (_DONE, the steps' return value): `answer` sent in, or
    `error` thrown in, where the last step left off."""
    try:
        return (steps.send(answer) if error is None else steps.throw(error)), None
    except StopIteration as done:
        return _DONE, done.value


def steps_run(steps: Steps) -> Any:
    """Run a decision's steps in this thread; its return value."""
    answer, error = None, None
    while (step := _next(steps, answer, error))[0] is not _DONE:
        try:
            answer, error = _sync(step[0]), None
        except Exception as exc:
            answer, error = None, exc
    return step[1]


def _logged(future) -> None:
    if not future.cancelled() and future.exception() is not None:
        logger.error("background step failed", exc_info=future.exception())


def _background(in_thread: InThread, step: Background) -> None:
    """Start `step` in a thread, not waiting for it: it must not fail the decision, not even
    when the threads are gone (a server stopping)."""
    try:
        in_thread(step.fn, step.kwargs).add_done_callback(_logged)
    except RuntimeError as exc:
        logger.warning("background step %s not started: %s", step.fn.__qualname__, exc)


async def steps_run_async(steps: Steps, *, in_thread: InThread,
                          queue: Callable[..., Awaitable[Any]] | None = None) -> Any:
    """Run a decision's steps on the running event loop: script calls awaited there, blocking
    and background work through `in_thread`, which must return a future (`run_in_executor`),
    a decision that may wait through `queue` (None: answered None)."""
    answer, error = None, None
    while (next_step := _next(steps, answer, error))[0] is not _DONE:
        step, answer, error = next_step[0], None, None
        kind = type(step)
        try:
            if kind is ScriptCall:
                try:
                    answer = await script_run_async(step.name, keys=step.keys, args=step.args)
                except NeedsThread:
                    answer = await in_thread(script_run, {"name": step.name, "keys": step.keys,
                                                          "args": step.args})
            elif kind is Background:
                _background(in_thread, step)
            elif kind is Queued:
                answer = None if queue is None else await queue(**step.kwargs)
            else:
                answer = await in_thread(step.fn, step.kwargs)
        except Exception as exc:
            error = exc
    return next_step[1]
