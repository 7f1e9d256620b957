"""`python -m gateway.sim --port 9100 --rate 750 --ttft-ms 20` (see gateway/sim/__init__.py)."""

import argparse
import os

import orjson
import uvicorn

from gateway.sim.app import SimConfig, create_app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m gateway.sim", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--rate", type=float, default=750.0, help="output tokens/s")
    parser.add_argument("--ttft-ms", type=float, default=20.0, help="time to first token")
    parser.add_argument("--tick-ms", type=float, default=10.0)
    parser.add_argument("--output-tokens", type=int, default=64,
                        help="reply length without max_tokens")
    parser.add_argument("--slow-rate", type=float, default=20.0)
    parser.add_argument("--models", default="gpt-5.6-sol", help="comma-separated")
    parser.add_argument("--api-key", default=os.environ.get("SIM_API_KEY", ""))
    parser.add_argument("--fault", default="", help='JSON, e.g. {"fault": "slow"}')
    args = parser.parse_args(argv)
    config = SimConfig(rate=args.rate, ttft_ms=args.ttft_ms, tick_ms=args.tick_ms,
                       output_tokens=args.output_tokens, slow_rate=args.slow_rate,
                       models=tuple(m.strip() for m in args.models.split(",") if m.strip()),
                       api_key=args.api_key,
                       fault=orjson.loads(args.fault) if args.fault else {})
    uvicorn.run(create_app(config), host=args.host, port=args.port, log_level="warning",
                access_log=False)


if __name__ == "__main__":
    main()
