"""The two drivers of a decision's steps (quotas/limiter/steps.py) do the same with what the
steps ask: a blocking call's value is sent back in and its exception thrown in, where the
steps may handle it; background work never fails the decision, not even when it cannot be
started. (Script calls against real Redis: test_hook_on_loop.py and the engine's tests.)"""

import asyncio
import logging

import pytest

from quotas.limiter.steps import Background, Blocking, steps_run, steps_run_async
from tests.aio import run_async


class Refused(Exception):
    pass


def _refuse():
    raise Refused("no")


def _fail_in_background():
    raise Refused("in the background")


def _note(*, log: list, what: str) -> None:
    log.append(what)


def _decision(log: list):
    try:
        yield Blocking(_refuse, {})
    except Refused as exc:  # thrown in where the step was asked
        log.append(f"handled {exc}")
    value = yield Blocking(lambda *, x: x * 2, {"x": 21})
    yield Background(_fail_in_background, {})  # fails where nobody waits for it
    yield Background(_note, {"log": log, "what": "background ran"})
    return value


def _in_thread(fn, kwargs):
    return asyncio.get_running_loop().run_in_executor(None, lambda: fn(**kwargs))


def test_the_thread_driver_sends_values_and_throws_errors_in(caplog):
    log = []
    with caplog.at_level(logging.ERROR):
        assert steps_run(_decision(log)) == 42
    assert log == ["handled no", "background ran"]
    assert "background step" in caplog.text


def test_the_loop_driver_does_the_same_off_the_loop():
    log = []

    async def run():
        value = await steps_run_async(_decision(log), in_thread=_in_thread)
        await asyncio.sleep(0.05)  # the background steps are not waited for
        return value
    assert run_async(run()) == 42
    assert log == ["handled no", "background ran"]


def test_background_work_that_cannot_start_does_not_fail_the_decision(caplog):
    def gone(fn, kwargs):
        if fn in (_fail_in_background, _note):
            raise RuntimeError("cannot schedule new futures after shutdown")
        return _in_thread(fn, kwargs)

    with caplog.at_level(logging.WARNING):
        assert run_async(steps_run_async(_decision([]), in_thread=gone)) == 42
    assert "not started" in caplog.text


def test_an_error_the_steps_do_not_handle_reaches_the_caller():
    def steps():
        yield Blocking(_refuse, {})

    with pytest.raises(Refused):
        steps_run(steps())
    with pytest.raises(Refused):
        run_async(steps_run_async(steps(), in_thread=_in_thread))
