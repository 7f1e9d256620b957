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
