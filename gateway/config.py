"""The gateway's configuration, from environment variables, parsed strictly (a typo fails at
start, never at the first request).

SLUICE_URL                 Sluice's base URL (the hook), e.g. http://127.0.0.1:8000
SLUICE_GATEWAY_TOKEN       a gateway token (gw_...), from `manage.py gateway_token_create`
GATEWAY_UPSTREAM_URL       the default upstream's OpenAI base URL, e.g. http://127.0.0.1:9100/v1
GATEWAY_UPSTREAM_API_KEY   its secret (sent as the bearer upstream; never the caller's key)
GATEWAY_UPSTREAMS          optional JSON: upstreams per pool, overriding the default, keyed by
                           pool id ("3"), "model:region:tier", "model:tier" or "model", each
                           {"base_url": ..., "api_key": ...}
GATEWAY_SPOOL_PATH         where undeliverable usage waits (default .gateway/usage.jsonl): each
                           process claims <base>-0.jsonl, -1, ... of its own (gateway/spools.py)
GATEWAY_UPSTREAM_TIMEOUT   seconds without a byte from the upstream before giving up (60)
GATEWAY_CONNECT_TIMEOUT    seconds to connect to the upstream (5)
GATEWAY_USAGE_FLUSH_INTERVAL  seconds between usage batches (0.5)
GATEWAY_REGION             optional: the region to ask Sluice for (models served in several)
GATEWAY_STREAM_COALESCE_MS at most one write to a streaming client per this many ms (10; 0:
                           one write per upstream read); the first token is never held
GATEWAY_MAX_BODY_BYTES     the largest request body accepted, declared or read (32 MiB: a
                           few base64 images); larger ones answer 413 without being read
GATEWAY_LEASES             1 (default): admitted requests hold leases, renewed by a heartbeat,
                           released when their stream ends, their progress kept next to the
                           spool (gateway/leases.py); 0: today's reservations
GATEWAY_PROGRESS_INTERVAL  seconds between progress appends (0.025, at most 0.25)
"""

import dataclasses
import os

import orjson

MAX_BODY_BYTES = 32 * 2 ** 20
STREAM_COALESCE_MS = 10.0


class ConfigError(Exception):
    pass


@dataclasses.dataclass(frozen=True)
class Upstream:
    base_url: str
    api_key: str = ""


@dataclasses.dataclass(frozen=True)
class GatewayConfig:
    sluice_url: str
    gateway_token: str
    upstreams: dict[str, Upstream]      # "*" is the default
    spool_path: str = ""
    upstream_timeout: float = 60.0
    connect_timeout: float = 5.0
    usage_flush_interval: float = 0.5
    region: str | None = None
    max_body_bytes: int = MAX_BODY_BYTES
    stream_coalesce_seconds: float = STREAM_COALESCE_MS / 1000  # 0: off
    leases: bool = True
    progress_interval: float = 0.025

    def upstream_for(self, pool: dict) -> Upstream | None:
        """The upstream serving one of Sluice's pools ({"id", "model", "region", "tier"})."""
        keys = (str(pool.get("id")), f"{pool.get('model')}:{pool.get('region')}:{pool.get('tier')}",
                f"{pool.get('model')}:{pool.get('tier')}", str(pool.get("model")), "*")
        return next((self.upstreams[k] for k in keys if k in self.upstreams), None)

    @classmethod
    def from_env(cls, env: dict | None = None) -> "GatewayConfig":
        env = os.environ if env is None else env
        upstreams: dict[str, Upstream] = {}
        if env.get("GATEWAY_UPSTREAM_URL"):
            upstreams["*"] = Upstream(_url(env["GATEWAY_UPSTREAM_URL"], "GATEWAY_UPSTREAM_URL"),
                                      env.get("GATEWAY_UPSTREAM_API_KEY", ""))
        if env.get("GATEWAY_UPSTREAMS"):
            upstreams.update(_upstreams(env["GATEWAY_UPSTREAMS"]))
        if not upstreams:
            raise ConfigError("set GATEWAY_UPSTREAM_URL (or GATEWAY_UPSTREAMS)")
        for name in ("SLUICE_URL", "SLUICE_GATEWAY_TOKEN"):
            if not env.get(name):
                raise ConfigError(f"{name} is required")
        return cls(
            sluice_url=_url(env["SLUICE_URL"], "SLUICE_URL"),
            gateway_token=env["SLUICE_GATEWAY_TOKEN"],
            upstreams=upstreams,
            spool_path=env.get("GATEWAY_SPOOL_PATH", ""),
            upstream_timeout=_seconds(env, "GATEWAY_UPSTREAM_TIMEOUT", 60.0),
            connect_timeout=_seconds(env, "GATEWAY_CONNECT_TIMEOUT", 5.0),
            usage_flush_interval=_seconds(env, "GATEWAY_USAGE_FLUSH_INTERVAL", 0.5),
            region=env.get("GATEWAY_REGION") or None,
            max_body_bytes=_bytes(env, "GATEWAY_MAX_BODY_BYTES", MAX_BODY_BYTES),
            stream_coalesce_seconds=_coalesce_ms(env) / 1000,
            leases=_flag(env, "GATEWAY_LEASES", True),
            progress_interval=_seconds(env, "GATEWAY_PROGRESS_INTERVAL", 0.025,
                                       most=0.25),
        )


def _url(value: str, name: str) -> str:
    if not value.startswith(("http://", "https://")):
        raise ConfigError(f"{name} must be an http(s) URL, not {value!r}")
    return value.rstrip("/")


def _seconds(env, name: str, default: float, *, most: float | None = None) -> float:
    raw = env.get(name)
    if raw in (None, ""):
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name} must be a number of seconds, not {raw!r}") from None
    if value <= 0:
        raise ConfigError(f"{name} must be positive")
    if most is not None and value > most:
        raise ConfigError(f"{name} must be at most {most}")
    return value


def _coalesce_ms(env) -> float:
    raw = env.get("GATEWAY_STREAM_COALESCE_MS")
    if raw in (None, ""):
        return STREAM_COALESCE_MS
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"GATEWAY_STREAM_COALESCE_MS must be a number of ms, not {raw!r}"
                          ) from None
    if not 0 <= value <= 1000:  # a token held longer than a second is no longer a stream
        raise ConfigError("GATEWAY_STREAM_COALESCE_MS must be between 0 and 1000")
    return value


def _flag(env, name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw in (None, ""):
        return default
    if raw not in ("0", "1"):
        raise ConfigError(f"{name} must be 0 or 1, not {raw!r}")
    return raw == "1"


def _bytes(env, name: str, default: int) -> int:
    raw = env.get(name)
    if raw in (None, ""):
        return default
    if not raw.isdigit() or int(raw) <= 0:
        raise ConfigError(f"{name} must be a positive number of bytes, not {raw!r}")
    return int(raw)


def _upstreams(raw: str) -> dict[str, Upstream]:
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ConfigError(f"GATEWAY_UPSTREAMS is not JSON: {exc}") from None
    if not isinstance(parsed, dict):
        raise ConfigError("GATEWAY_UPSTREAMS must be a JSON object")
    out = {}
    for key, spec in parsed.items():
        if not isinstance(spec, dict) or not isinstance(spec.get("base_url"), str) or (
                set(spec) - {"base_url", "api_key"}):
            raise ConfigError(f"GATEWAY_UPSTREAMS[{key!r}] must be "
                              '{"base_url": ..., "api_key": ...}')
        out[str(key)] = Upstream(_url(spec["base_url"], f"GATEWAY_UPSTREAMS[{key!r}]"),
                                 str(spec.get("api_key", "")))
    return out
