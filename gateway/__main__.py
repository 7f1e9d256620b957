"""`python -m gateway --port 8080 [--workers N]`: serve the reference gateway with uvicorn.

Configuration comes from the environment (gateway/config.py); `--workers` runs N processes
on one port (each with its own usage spool), as N containers behind a load balancer would.
"""

import argparse

import uvicorn

from gateway.config import GatewayConfig


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gateway", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    GatewayConfig.from_env()  # fail now, with a clear message, on a bad setting
    uvicorn.run("gateway.app:create_app", factory=True, host=args.host, port=args.port,
                workers=args.workers, log_level="warning", access_log=False,
                # No X-Forwarded-* rewriting: the gateway never looks at the client's address.
                proxy_headers=False)


if __name__ == "__main__":
    main()
