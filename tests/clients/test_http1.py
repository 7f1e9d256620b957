"""sluice_client.http1 holding a streaming answer: a held response reads nothing, whatever the
server writes meanwhile comes in one read once it is let go, and an answer closed while held
is held no more (a tick that comes later does nothing)."""

import asyncio

from sluice_client.http1 import Http1Pool

from tests.aio import run_async

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def turns(n: int = 20) -> None:
    """Let the loop run: whatever a socket has ready is read in these turns."""
    for _ in range(n):
        await asyncio.sleep(0)


def test_a_held_answer_reads_the_writes_made_meanwhile_in_one_read():
    async def run():
        wrote, go_on = asyncio.Event(), asyncio.Event()

        async def serve(reader, writer):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(HEAD + chunk(b"data: 0\n\n"))
            await writer.drain()
            await go_on.wait()
            for i in range(1, 5):  # four writes, as a server writing a token at a time
                writer.write(chunk(b"data: %d\n\n" % i))
                await writer.drain()
                await asyncio.sleep(0)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            wrote.set()

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        pool = Http1Pool(f"http://127.0.0.1:{port}")
        response = await pool.request("GET", "/stream")
        assert await response.readany() == b"data: 0\n\n"
        response.hold()
        go_on.set()
        await wrote.wait()
        await turns()
        assert not response.buffer  # nothing read while held
        response.unhold()
        reads = [await response.readany()]
        assert reads == [b"data: 1\n\ndata: 2\n\ndata: 3\n\ndata: 4\n\n"]
        assert await response.readany() == b""
        response.release()
        assert len(pool._idle) == 1  # read to its end: kept
        await pool.close()
        server.close()
        await server.wait_closed()

    run_async(run())


def test_an_answer_closed_while_held_is_held_no_more():
    async def run():
        async def serve(reader, writer):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(HEAD + chunk(b"data: 0\n\n"))
            await writer.drain()
            await asyncio.sleep(3600)

        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        pool = Http1Pool(f"http://127.0.0.1:{port}")
        response = await pool.request("GET", "/stream")
        await response.readany()
        response.hold()
        connection = response.connection
        response.close()  # closed while held: nothing left paused
        assert not response.held
        response.unhold()  # a tick that comes after: nothing to do
        assert connection.transport.is_closing()
        await pool.close()
        server.close()

    run_async(run())
