"""The ASGI scope of one request, for the benchmarks that call an ASGI application in process
(gateway_asgi.py, gateway_instructions.py). No side effects on import: gateway_instructions.py
runs another checkout's gateway from PYTHONPATH."""


def asgi_post_scope(path: str, body: bytes, *, key: str) -> dict:
    """The ASGI scope a server hands over for a POST of the JSON `body` to `path` on
    127.0.0.1:8080, with the bearer `key`."""
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
            "query_string": b"", "root_path": "", "server": ("127.0.0.1", 8080),
            "client": ("127.0.0.1", 50000),
            "headers": [(b"host", b"127.0.0.1:8080"),
                        (b"authorization", b"Bearer " + key.encode()),
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode())]}
