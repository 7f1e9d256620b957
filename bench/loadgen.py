"""A small HTTP/1.1 load generator: several processes, each with asyncio connections that keep
the connection alive when the server allows it. Pure Python so that the benchmarks run with one
command on any machine; it costs CPU, which on a 2-core machine is shared with the server (the
figures are therefore a floor).

Closed loop (`rate=None`): each connection sends its next request when the last answer came.
Open loop (`rate=N`): requests are scheduled at N/s in total and latency is measured from the
scheduled time, so a slow server cannot hide its queueing (no coordinated omission).
"""

import asyncio
import multiprocessing as mp
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Result:
    requests: int
    seconds: float
    latencies_ms: list[float]
    statuses: dict[int, int]

    @property
    def rps(self) -> float:
        return self.requests / self.seconds

    def percentile(self, p: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))] if ordered else 0.0


async def _read_response(reader) -> tuple[int, bool]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length, close = 0, False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"connection" and value.strip().lower() == b"close":
            close = True
    if length:
        await reader.readexactly(length)
    return status, close


async def _connection(host, port, make_request, deadline, schedule, out):
    reader = writer = None
    while True:
        slot = next(schedule) if schedule else time.perf_counter()
        if slot >= deadline:
            break
        delay = slot - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if writer is None:
            reader, writer = await asyncio.open_connection(host, port)
        writer.write(make_request())
        status, close = await _read_response(reader)
        out.append(((time.perf_counter() - slot) * 1000, status))
        if close:
            writer.close()
            reader = writer = None


def _schedule(start: float, interval: float, offset: int, stride: int):
    i = offset
    while True:
        yield start + i * interval
        i += stride


def _worker(index, processes, host, port, factory, connections, seconds, rate, start, queue):
    make_request = factory(index)

    async def main():
        out: list = []
        deadline = start + seconds
        tasks = []
        for c in range(connections):
            sched = None
            if rate:
                stride = processes * connections
                sched = _schedule(start, 1.0 / rate, index * connections + c, stride)
            tasks.append(_connection(host, port, make_request, deadline, sched, out))
        while time.perf_counter() < start:
            await asyncio.sleep(0.001)
        await asyncio.gather(*tasks)
        return out

    queue.put(asyncio.run(main()))


def run(*, host: str, port: int, request_factory: Callable, processes: int, connections: int,
        seconds: float, rate: float | None = None) -> Result:
    """`request_factory(process_index)` returns a function producing raw request bytes."""
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    start = time.perf_counter() + 0.5
    procs = [ctx.Process(target=_worker, args=(i, processes, host, port, request_factory,
                                               connections, seconds, rate, start, queue))
             for i in range(processes)]
    for p in procs:
        p.start()
    samples = [s for _ in procs for s in queue.get()]
    for p in procs:
        p.join()
    statuses: dict[int, int] = {}
    for _, status in samples:
        statuses[status] = statuses.get(status, 0) + 1
    return Result(len(samples), seconds, [ms for ms, _ in samples], statuses)


def post_factory(path: str, headers: dict[str, str], body: Callable[[int, int], bytes]):
    """A request factory for POSTs whose body depends on (process index, sequence number)."""
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())

    def factory(index):
        counter = iter(range(10**12))

        def make():
            payload = body(index, next(counter))
            return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}"
                    f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
                    ).encode() + payload
        return make
    return factory


def get_factory(path: str):
    raw = f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode()
    return lambda index: (lambda: raw)
