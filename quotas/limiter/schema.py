"""What the engine stores in Redis, and what its scripts take and return: declared once, here.

Python builds keys and arguments and decodes replies from these declarations. The Lua scripts
say the same names, and connection.py turns them into what they stand for when it loads a
script (`lua_expand`; tests/quotas/test_limiter_schema.py holds both sides to it):

    F.org.status   -> 'st'        a stored hash field (F.org alone: the group as a Lua table)
    KEY.registry   -> 'keys'      a key name under the pool's hash tag
    K.registry     -> KEYS[1]     this script's KEYS, by name
    A.cost         -> ARGV[3]     this script's ARGV, by name

A name the schema does not declare fails the load. Expanded at load time rather than built as
Lua tables, they cost authorize nothing per call (tables rebuilt on every EVALSHA made it about
60% slower inside Redis). What a script needs at run time comes from `lua_prelude`:
`ITEMS` (scripts taking a list: one per key after its KEYS) and `reply{name = value}`, which
returns the reply's fields in their declared order.

Stored field names stay as short as they were before they were declared: a reservation hash is
written per request and kept six hours past its expiry, so its field names are a real part of
Redis's memory, and renaming them would orphan the state of a running deployment.
"""

import re
from dataclasses import MISSING, dataclass, fields, is_dataclass
from functools import cache
from typing import NamedTuple

ALLOWED, DUPLICATE, UNSYNCED = "allowed", "duplicate", "unsynced"


# Stored hash fields: readable name = the field as stored.

class OrgFields(NamedTuple):
    """{p}:org:<org>: one org's state and limits in the pool (org_publish writes them all)."""
    status: str = "st"
    suspension_reason: str = "sr"
    has_allocation: str = "alloc"  # 1 while an allocation is in force, else 0
    daily_tokens: str = "daily"
    max_concurrency: str = "conc"
    spend_cap: str = "scap"  # micro-dollars a month, 0 = none
    guaranteed_rate: str = "gr"  # tokens/s
    guaranteed_capacity: str = "gc"  # tokens
    burst_rate: str = "br"  # on top of the guaranteed rate
    burst_capacity: str = "bc"


class PoolFields(NamedTuple):
    """{p}:pool: the rate bursts borrow at (capacity minus every guarantee in force)."""
    headroom_rate: str = "hr"
    headroom_capacity: str = "hc"


class BucketFields(NamedTuple):
    """{p}:tb:<org>: the org's two token buckets (a missing bucket is full)."""
    guaranteed: str = "g"
    burst: str = "b"
    at: str = "t"  # epoch ms of the last refill


class HeadroomFields(NamedTuple):
    """{p}:hb: the pool's headroom bucket, shared by every org's burst."""
    level: str = "l"
    at: str = "t"


class ReservationFields(NamedTuple):
    """{p}:res:<request_id>: one admitted request, until settled (then kept for retries)."""
    org: str = "o"
    api_key: str = "k"
    cost: str = "c"  # tokens reserved
    from_guaranteed: str = "g"
    from_burst: str = "b"  # also borrowed from the pool's headroom
    day: str = "d"  # YYYYMMDD the tokens were counted in
    expires: str = "x"  # epoch ms
    state: str = "s"  # open, settled


ORG, POOL, BUCKET, HEADROOM, RESERVATION = (OrgFields(), PoolFields(), BucketFields(),
                                            HeadroomFields(), ReservationFields())
FIELDS = {"org": ORG, "pool": POOL, "bucket": BUCKET, "headroom": HEADROOM, "res": RESERVATION}


class KeyNames(NamedTuple):
    """A pool's keys are "{p<pool>}:<name>[:<part>...]": the hash tag puts them all in one
    Redis Cluster slot, so one script may touch any of them."""
    registry: str = "keys"  # hash: API-key digest -> "<org>:<key_id>:<expires ms, 0 = never>"
    synced: str = "synced"  # set once the pool was rebuilt in full
    pool: str = "pool"  # hash: PoolFields
    headroom_bucket: str = "hb"  # hash: HeadroomFields
    reservation: str = "res"  # :<request_id>, hash: ReservationFields
    org: str = "org"  # :<org>, hash: OrgFields
    org_keys: str = "okeys"  # :<org>, set: the org's digests in the registry
    buckets: str = "tb"  # :<org>, hash: BucketFields
    inflight: str = "inflight"  # :<org>, sorted set: request_id by expiry
    day: str = "day"  # :<org>:<YYYYMMDD>, tokens reserved or used that UTC day
    spend: str = "spend"  # :<org>:<YYYYMM>, micro-dollars spent that month
    rebuild: str = "rebuild"  # the rebuild lock: the holder's random token, with a TTL


KEY = KeyNames()


class SharedKeyNames(NamedTuple):
    """Keys of no pool, under their own hash tag (one Cluster slot)."""
    gateway_tokens: str = "{sluice}:gw"  # hash: token digest -> "<id>:<name>", + SYNCED_FIELD
    gateway_tokens_used: str = "{sluice}:gw:used"  # hash: token id -> last use, epoch s
    processes: str = "{sluice}:procs"  # sorted set: process id by last heartbeat, epoch ms


SHARED_KEY = SharedKeyNames()
SYNCED_FIELD = "synced"  # a field no digest (64 hex digits) can be


def pool_tag(pool_id: int) -> str:
    return f"{{p{pool_id}}}"


def pool_key(pool_id: int, name: str, *parts: object) -> str:
    return ":".join((pool_tag(pool_id), name, *map(str, parts)))


# Replies.

@dataclass(frozen=True)
class Decision:
    """authorize's reply, field for field in this order."""
    outcome: str  # "allowed", "duplicate", or the refusal code
    org_id: int | None = None
    api_key_id: int | None = None
    reserved_tokens: int = 0
    retry_after_ms: int | None = None
    tokens_limit: int = 0
    tokens_remaining: int = 0
    tokens_reset_ms: int = 0
    day_limit: int = 0
    day_remaining: int = 0
    day_reset_ms: int = 0
    requests_limit: int = 0
    requests_remaining: int = 0
    requests_reset_ms: int = 0

    @property
    def allowed(self) -> bool:
        return self.outcome in (ALLOWED, DUPLICATE)


class HeldReservation(NamedTuple):
    """lookup's reply per request_id the pool holds a reservation for."""
    org_id: int
    api_key_id: int | None = None  # None for usage settled without a reservation
    live: int = 0  # 1 while the reservation has not expired


@dataclass(slots=True)  # not frozen: a usage batch builds up to 1,000 (frozen __init__ is slow)
class Settlement:
    """One item of settle: a finished request and what it used."""
    request_id: str
    org_id: int
    tokens: int  # input + output actually used


# Script arguments. A script taking a list gets one extra key per item (after its KEYS) and the
# item's fields in ARGV (after its ARGV).

class AuthorizeKeys(NamedTuple):
    registry: str
    synced: str
    pool: str
    headroom_bucket: str
    reservation: str


class AuthorizeArgs(NamedTuple):
    digest: str  # SHA-256 of the API key: Redis never sees a key
    request_id: str
    cost: int  # tokens to reserve
    now_ms: int
    day: str  # YYYYMMDD (UTC)
    month: str  # YYYYMM
    ttl_ms: int  # how long the reservation holds its slot
    dry_run: int  # 1: decide, reserve nothing
    record_ttl_ms: int  # how long the reservation's record is kept


class SettleKeys(NamedTuple):
    pool: str
    headroom_bucket: str


class SettleArgs(NamedTuple):
    now_ms: int
    day: str
    record_ttl_ms: int


class LookupArgs(NamedTuple):
    now_ms: int


class LookupItem(NamedTuple):
    """One per request_id asked about: its reservation's key, no arguments."""


class OrgPublishKeys(NamedTuple):
    registry: str
    pool: str
    org: str
    org_keys: str
    day: str  # today's counter
    spend: str  # this month's counter


class OrgPublishArgs(NamedTuple):
    state: str  # an OrgPublishState as JSON (not a hot call: a readable object beats offsets)


class OrgPublishState(NamedTuple):
    org: dict  # every OrgFields value, by readable name
    pool: dict  # every PoolFields value
    api_keys: list  # [{"digest", "entry"}]: the registry entries of the org's usable keys
    day_used: int  # tokens recorded today: the floor of a day counter rebuilt after a flush
    month_spend: int  # micro-dollars rated this month: the floor of the month's counter
    month_spend_ttl_s: int  # how long a month's counter lives


class PoolPublishKeys(NamedTuple):
    pool: str


class PoolPublishArgs(NamedTuple):
    headroom_rate: int
    headroom_capacity: int


@dataclass(frozen=True)
class Script:
    keys: type | None  # KEYS in order (None: only item keys)
    args: type | None  # ARGV in order
    item: type | None = None  # the fields of each item of a list
    reply: type | None = None  # a reply built with reply{...}
    shared: tuple[str, ...] = ()  # scripts/_<name>.lua it uses besides _common.lua


SCRIPTS = {
    "authorize": Script(keys=AuthorizeKeys, args=AuthorizeArgs, reply=Decision,
                        shared=("buckets",)),
    "settle": Script(keys=SettleKeys, args=SettleArgs, item=Settlement, shared=("buckets",)),
    "lookup": Script(keys=None, args=LookupArgs, item=LookupItem, reply=HeldReservation),
    "org_publish": Script(keys=OrgPublishKeys, args=OrgPublishArgs),
    "pool_publish": Script(keys=PoolPublishKeys, args=PoolPublishArgs),
}


@cache  # reply_decode asks once per decision
def field_names(layout: type | None) -> tuple[str, ...]:
    """The fields of a NamedTuple or dataclass, in order."""
    if layout is None:
        return ()
    if is_dataclass(layout):
        return tuple(f.name for f in fields(layout))
    return layout._fields


def _defaults(layout: type) -> dict:
    if is_dataclass(layout):
        return {f.name: f.default for f in fields(layout) if f.default is not MISSING}
    return layout._field_defaults


def stored_values(layout: NamedTuple, **values) -> dict:
    """The values of every field of one stored hash, by readable name (none missing, none
    unknown: Lua's hash_write stores exactly these)."""
    if values.keys() != set(layout._fields):
        raise ValueError(f"{type(layout).__name__} takes {layout._fields}, not {tuple(values)}")
    return values


def reply_decode(layout: type, reply: list):
    return layout(**dict(zip(field_names(layout), reply, strict=True)))


def _lua(value) -> str:
    if value is None:
        return "false"  # a Lua nil would end the reply array early; false arrives as None
    if isinstance(value, str):
        return f"'{value}'"
    return str(value)


def _lua_table(names: dict) -> str:
    return "{" + ", ".join(f"{name} = {value}" for name, value in names.items()) + "}"


# F.<group>.<field>, F.<group>, KEY.<name>, K.<name>, A.<name> (not a field of another table).
_NAME = re.compile(r"(?<![\w.])(F|KEY|K|A)((?:\.\w+)+)")


def _names(script: Script) -> dict[str, dict[str, str]]:
    return {
        "KEY": {n: _lua(v) for n, v in KEY._asdict().items()},
        "K": {n: f"KEYS[{i}]" for i, n in enumerate(field_names(script.keys), 1)},
        "A": {n: f"ARGV[{i}]" for i, n in enumerate(field_names(script.args), 1)},
    }


def lua_expand(name: str, source: str) -> str:
    """Replace the script's F, KEY, K and A names with what they stand for (at load time: they
    cost nothing per call). A name the schema does not declare raises LookupError."""
    names = _names(SCRIPTS[name])

    def resolve(match: re.Match) -> str:
        table, path = match.group(1), match.group(2)[1:].split(".")
        if table == "F" and path[0] in FIELDS:
            fields_ = FIELDS[path[0]]._asdict()
            if len(path) == 1:
                return _lua_table({n: _lua(v) for n, v in fields_.items()})
            if len(path) == 2 and path[1] in fields_:
                return _lua(fields_[path[1]])
        elif table != "F" and len(path) == 1 and path[0] in names[table]:
            return names[table][path[0]]
        raise LookupError(f"{name}.lua: {match.group(0)} is not declared in schema.py")

    return _NAME.sub(resolve, source)


def lua_prelude(name: str) -> str:
    """What a script needs at run time: its list items (ITEMS) and its reply builder."""
    script = SCRIPTS[name]
    keys, args = field_names(script.keys), field_names(script.args)
    lines = [f"-- Generated from quotas/limiter/schema.py for {name}.lua."]
    if script.item is not None:
        width = len(field_names(script.item))
        record = {"key": f"KEYS[{len(keys)} + i]"} | {
            n: f"ARGV[{len(args)} + (i - 1) * {width} + {j}]"
            for j, n in enumerate(field_names(script.item), 1)}
        lines += ["local ITEMS = {}",
                  f"for i = 1, #KEYS - {len(keys)} do ITEMS[i] = {_lua_table(record)} end"]
    if script.reply is not None:
        defaults = _defaults(script.reply)
        values = ", ".join(f"r.{n}" if n not in defaults else f"r.{n} or {_lua(defaults[n])}"
                           for n in field_names(script.reply))
        lines.append(f"local function reply(r) return {{{values}}} end")
    return "\n".join(lines) + "\n"
