"""The admission queue's script: one order per pool, in Redis, shared by every hook process.

A request that asks to wait (a budget, `queue_threshold_ms`) and cannot be admitted now joins
its pool's queue; it is admitted by authorize's own script when its turn comes and it fits,
or refused when its budget ends, never later. One script, queue.lua, does all of it in the
pool's hash tag (one Redis Cluster slot) with authorize.lua built in as a function
(`_source`): a waiter is decided and charged exactly as a request, atomically, never over any
bucket. Operations:

- join: authorize's decision when nobody waits (or the request asks for no wait); else the
  request's ETA, and a refusal at once when it exceeds the budget (the refusal's own code,
  retry = ETA) or when the pool's or the org's queue is full (`queue_full`); else it waits.
- pump: admit waiters in fair order while they fit (queue.lua says the order), drop those
  past their deadline, publish what happened on the pool's channel.
- leave: a waiter whose budget ended or whose client went away leaves at once (or learns it
  was admitted meanwhile).

Django-free like quotas/limiter, on which it is built (waiting.py holds the waiting side).
"""

import json
import re
from pathlib import Path
from typing import NamedTuple

from quotas.limiter.clock import time_stamps
from quotas.limiter.connection import SCRIPTS_DIR, engine_config, script_register
from quotas.limiter.engine import RECORD_GRACE_MS
from quotas.limiter.schema import (
    KEY,
    AuthorizeArgs,
    Decision,
    Script,
    lua_expand,
    pool_key,
)

HERE = Path(__file__).parent / "scripts"
NAME = "queue"
# A waiter's record outlives its deadline this long: its process still reads its outcome.
GRACE_MS = 60_000
# A pool's speed floor and TTFT ceiling when the caller has none (quotas/models.py's defaults).
SPEED_FLOOR_TPS, TTFT_CEILING_MS = 300, 2000


class QueueKeyNames(NamedTuple):
    """The queue's keys under the pool's hash tag (queue.lua's header lists them all)."""
    meta: str = "qm"
    deadlines: str = "qd"
    defaults: str = "qdef"
    waiter: str = "qw"  # :<request_id>
    org: str = "qo"  # :<org>
    key: str = "qk"  # :<API-key digest>


QKEY = QueueKeyNames()


class QueueKeys(NamedTuple):
    registry: str
    synced: str
    pool: str
    reservation: str
    orgs: str
    meta: str
    deadlines: str
    defaults: str


# authorize's ARGV, then the queue's: authorize.lua reads its own positions unchanged.
QueueArgs = NamedTuple("QueueArgs", [*AuthorizeArgs.__annotations__.items(),
                                     ("op", str),  # join, pump, leave
                                     ("budget_ms", int),  # -1: the key's or org's default
                                     ("max_wait_ms", int),  # the pool's maximum
                                     ("pool_cap", int), ("org_cap", int),  # waiters at most
                                     ("pump_max", int),  # decisions per pump at most
                                     # the pool's promise: a slot's ETA (queue.lua, slot_eta)
                                     ("speed_floor_tps", int), ("ttft_ceiling_ms", int)])
SCRIPT = Script(keys=QueueKeys, args=QueueArgs)


class ScriptCall(NamedTuple):
    name: str
    keys: QueueKeys
    args: tuple


class Joined(NamedTuple):
    """The script's reply. state: decided (authorize's answer, no wait), done (admitted or
    refused while waiting), refused (ETA beyond the budget), full, queued (its decision says
    whose it is: org, API key), left, gone (not waiting: expired or unknown), pumped."""
    state: str
    decision: Decision | None
    eta_ms: int
    budget_ms: int
    next_at: int | None  # epoch ms: when a pump may admit someone (a bucket refills)
    message: dict | None  # what a pump did, as published


def _header() -> str:
    decision = Decision._fields
    args = AuthorizeArgs._fields
    constants = {
        "QK_WAITER": repr(QKEY.waiter), "QK_ORG": repr(QKEY.org), "QK_KEY": repr(QKEY.key),
        "GRACE_MS": GRACE_MS, "AUTHORIZE_ARGC": len(args),
        "AUTHORIZE_DRY": args.index("dry_run") + 1, "AUTHORIZE_NOW": args.index("now_ms") + 1,
        "AUTHORIZE_DAY": args.index("day") + 1, "AUTHORIZE_MONTH": args.index("month") + 1,
        "D_OUTCOME": 1, "D_ORG": decision.index("org_id") + 1,
        "D_KEY": decision.index("api_key_id") + 1,
        "D_RESERVED": decision.index("reserved_tokens") + 1,
        "D_RESERVED_IN": decision.index("reserved_input_tokens") + 1,
        "D_RESERVED_OUT": decision.index("reserved_output_tokens") + 1,
        "D_RETRY": decision.index("retry_after_ms") + 1, "D_SCOPE": decision.index("scope") + 1,
        "D_LIMIT": decision.index("limit") + 1}
    return "\n".join(f"local {name} = {value}" for name, value in constants.items())


def _source() -> str:
    """The shared parts, authorize.lua as `authorize_run(AK, AA)` (its KEYS and ARGV made
    the function's arguments), then queue.lua."""
    shared = "\n".join((SCRIPTS_DIR / f"_{part}.lua").read_text()
                       for part in ("common", "buckets", "guarantee"))
    authorize = lua_expand("authorize", (SCRIPTS_DIR / "authorize.lua").read_text())
    authorize = re.sub(r"\bARGV\[", "AA[", re.sub(r"\bKEYS\[", "AK[", authorize))
    return "\n".join((
        f"-- Built by admission/engine/queue.py.\n{_header()}",
        lua_expand(NAME, shared, SCRIPT),
        f"local function authorize_run(AK, AA)\n{authorize}\nend",
        lua_expand(NAME, (HERE / "queue.lua").read_text(), SCRIPT)))


script_register(NAME, _source)


def queue_key(pool_id: int, name: str, *parts: object) -> str:
    return pool_key(pool_id, name, *parts)


def pool_channel(pool_id: int) -> str:
    """What a pool's queue publishes on: admissions, and capacity freed (settle.lua)."""
    return pool_key(pool_id, KEY.queue_channel)


def queue_call(op: str, *, pool_id: int, digest: str, request_id: str, input_tokens: int = 0,
               max_output_tokens: int | None = None, tier: str = "auto",
               key_tier: str = "unknown", pool_tier: str = "fast", budget_ms: int = -1,
               max_wait_ms: int = 0, pool_cap: int = 0, org_cap: int = 0, pump_max: int = 64,
               lease_owner: str = "", lease_id: str = "", lease_for: str = "",
               lease_ttl_ms: int = 0, speed_floor_tps: int = SPEED_FLOOR_TPS,
               ttft_ceiling_ms: int = TTFT_CEILING_MS, now_ms: int) -> ScriptCall:
    """The queue script's call: authorize's KEYS and ARGV for the request (as engine.py's
    limiter_authorize builds them), then the queue's."""
    ttl_ms = lease_ttl_ms if lease_owner else engine_config().reservation_ttl_s * 1000
    day, month = time_stamps(now_ms)
    keys = QueueKeys(pool_key(pool_id, KEY.registry), pool_key(pool_id, KEY.synced),
                     pool_key(pool_id, KEY.pool), pool_key(pool_id, KEY.reservation, request_id),
                     queue_key(pool_id, KEY.queue_orgs), queue_key(pool_id, QKEY.meta),
                     queue_key(pool_id, QKEY.deadlines), queue_key(pool_id, QKEY.defaults))
    args = QueueArgs(digest, request_id, input_tokens,
                     -1 if max_output_tokens is None else max_output_tokens, tier, key_tier,
                     pool_tier, now_ms, day, month, ttl_ms, 0, ttl_ms + RECORD_GRACE_MS,
                     lease_owner, lease_id, lease_for,
                     op, budget_ms, max_wait_ms, pool_cap, org_cap, pump_max, speed_floor_tps,
                     ttft_ceiling_ms)
    return ScriptCall(NAME, keys, args)


def decision_decode(encoded: str | list | None) -> Decision | None:
    """A decision as queue.lua encodes it (JSON: Lua's false for none)."""
    if encoded is None:
        return None
    values = json.loads(encoded) if isinstance(encoded, str) else encoded
    # queue_timeout, left, queued: only its first fields, the rest their defaults.
    return Decision(*(None if v is False else v for v in values))


def reply_decode(reply: list) -> Joined:
    state, decision, eta, budget, next_at, message = reply
    return Joined(state, decision_decode(decision), int(eta or 0), int(budget or 0),
                  int(next_at) if next_at else None,
                  json.loads(message) if message else None)


def message_decode(data: str) -> dict:
    """A message on a pool's channel: a pump's outcome (JSON), or the instant capacity freed
    (settle.lua: a number): {"a": {request_id: decision}, "r": {...}, "x": [...], "n": ...}."""
    if data.startswith("{"):
        return json.loads(data)
    return {"freed": int(data)}
