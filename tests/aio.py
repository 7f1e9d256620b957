"""Running a coroutine from a sync test, whatever else the session runs: the browser suite's
Playwright (sync API) leaves an event loop running in the main thread, where asyncio.run()
refuses to start another. A thread of its own has no loop."""

import asyncio
from concurrent.futures import ThreadPoolExecutor


def run_async(coroutine):
    with ThreadPoolExecutor(max_workers=1) as thread:
        return thread.submit(asyncio.run, coroutine).result()
