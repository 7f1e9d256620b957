"""Running a coroutine from a sync test, whatever else the session runs: the browser suite's
Playwright (sync API) leaves an event loop running in the main thread, where asyncio.run()
refuses to start another. A thread of its own has no loop."""

import asyncio
from concurrent.futures import ThreadPoolExecutor


def run_async(coroutine):
    with ThreadPoolExecutor(max_workers=1) as thread:
        return thread.submit(asyncio.run, coroutine).result()


class LoopThread:
    """An event loop running in a thread of its own for as long as a test needs it, as a web
    worker's runs for as long as the process: `run(coroutine)` waits for its result."""

    def __init__(self) -> None:
        import threading

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coroutine, timeout: float = 60):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


_shared: LoopThread | None = None
_shared_lock = __import__("threading").Lock()


def shared_loop() -> LoopThread:
    """One loop for the whole run, as a web worker's (tests/hook.py serves the application on
    it): what the engine and the hook await runs there, from any test's thread."""
    global _shared
    with _shared_lock:
        if _shared is None:
            from quotas.hook.asgi import loop_threads_use

            _shared = LoopThread()

            async def start():
                loop_threads_use()  # its default executor: the process's threads, as served
            _shared.run(start())
        return _shared


def on_loop(coroutine, timeout: float = 60):
    """`coroutine`'s result, run on the shared loop (callable from any thread)."""
    return shared_loop().run(coroutine, timeout)


def limiter_authorize(**kwargs):
    """The engine's decision (a coroutine: the server awaits it on its loop) from a test's
    thread. Its blocking work (a pool rebuilt from PostgreSQL) runs in the loop's threads:
    a test that makes it read rows commits them (django_db(transaction=True))."""
    from quotas.limiter.engine import limiter_authorize as decide

    return on_loop(decide(**kwargs))
