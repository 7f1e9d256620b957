"""What the engine stores in Redis, and what its scripts take and return: declared once, here.

Python builds keys and arguments and decodes replies from these declarations. The Lua scripts
say the same names, and connection.py turns them into what they stand for when it loads a
script (`lua_expand`; tests/quotas/limiter/test_schema.py holds both sides to it):

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
# Internal outcomes: the hook routes on them and never shows them to a gateway.
TIER_MISMATCH = "tier_mismatch"  # the pool's tier is not the one the key's default asks for
SPILLED = "spilled"  # the request_id was served by another pool (a spilled request's retry)
# A key's default service tier, as its registry entry stores it and authorize names it.
KEY_TIERS = ("auto", "priority", "default")
# A lease's TTL where none is known: quotas/models.py's default (_common.lua's too).
LEASE_TTL_DEFAULT_MS = 15_000


# Stored hash fields: readable name = the field as stored.

class OrgFields(NamedTuple):
    """{p}:org:<org>: one org's state and limits in the pool (org_publish writes them all).
    Rates are tokens/s, capacities tokens. The output buckets meter output (decode) tokens; when
    the org has no input rates (its pool declares no prefill capacity) they meter input and
    output together, against the pool's one capacity."""
    status: str = "st"
    suspension_reason: str = "sr"
    has_allocation: str = "alloc"  # 1 while an allocation is in force, else 0
    daily_tokens: str = "daily"
    max_concurrency: str = "conc"
    spend_cap: str = "scap"  # micro-dollars a month, 0 = none
    guaranteed_rate: str = "gr"
    guaranteed_capacity: str = "gc"
    burst_rate: str = "br"  # on top of the guaranteed rate
    burst_capacity: str = "bc"
    input_guaranteed_rate: str = "igr"  # 0: input is metered with output
    input_guaranteed_capacity: str = "igc"
    input_burst_rate: str = "ibr"
    input_burst_capacity: str = "ibc"
    # What a reservation holds against the spend cap, per million tokens, premium included
    # (micro-dollars; 0 without a cap): the worst case of the pool's prices for this org.
    input_price: str = "pi"
    output_price: str = "po"


class PoolFields(NamedTuple):
    """{p}:pool: the rates bursts borrow at (capacity minus every guarantee in force), and the
    output estimate of an org without enough history (publishes write these; HeadroomFields
    share the hash)."""
    headroom_rate: str = "hr"
    headroom_capacity: str = "hc"
    input_headroom_rate: str = "ihr"
    input_headroom_capacity: str = "ihc"
    estimate_default: str = "ed"  # output tokens reserved before an org has history
    estimate_floor: str = "ef"  # an estimate never reserves fewer
    # How long a lease (a reservation its gateway renews, docs/hook.md) lives without a
    # heartbeat, ms. Read by authorize only for a lease, and by lease_update: not packed.
    lease_ttl: str = "lt"


class BucketFields(NamedTuple):
    """The org's token buckets, in {p}:org:<org> beside OrgFields (one read for limits and
    levels). A missing bucket is full; a level may be negative: usage beyond a reservation is
    a debt the refill pays."""
    guaranteed: str = "g"
    burst: str = "b"
    input_guaranteed: str = "gi"
    input_burst: str = "bi"
    at: str = "t"  # epoch ms of the last refill


class HeadroomFields(NamedTuple):
    """The pool's headroom buckets, shared by every org's burst, in {p}:pool beside
    PoolFields."""
    level: str = "l"
    input_level: str = "li"
    at: str = "t"


class ReservationFields(NamedTuple):
    """{p}:res:<request_id>: one admitted request, until settled (then kept for retries)."""
    org: str = "o"
    api_key: str = "k"
    cost: str = "c"  # tokens reserved, input and output
    input: str = "i"  # of which input
    # What authorize took from where, of the output dimension then the input one (0, nil, 0
    # where input is metered with output), packed (cmsgpack: numbers, not %.17g strings):
    # borrowed (from the burst and the headroom together), from the guaranteed bucket, and of
    # the free part (refill the headroom's capacity cut off) what the burst's level paid; the
    # rest of the free part was refill the burst's capacity cut off, nobody's. Settle gives
    # unused tokens back in the reverse order and lets that rest go. Absent: all of it came
    # from the guaranteed bucket (the common case writes nothing).
    taken: str = "tk"
    # A record written before `taken`: what came from the burst, free and borrowed together
    # (absent: 0), refunded to the burst and the headroom, the rest to the guaranteed bucket.
    # Read by settle until such records expire; written no more.
    from_burst: str = "b"
    input_from_burst: str = "bi"
    key_slice: str = "ks"  # 1: the key's own buckets were debited too (absent: no)
    day: str = "d"  # YYYYMMDD the tokens were counted in
    expires: str = "x"  # epoch ms
    state: str = "s"  # settled; spilled: a marker, served by another pool (absent: open);
    #                   a lease's: released (slot freed, usage awaited), expired (the sweep's)
    # A lease's only (absent: not a lease):
    lease_owner: str = "lo"  # the gateway process holding it
    lease_expired: str = "le"  # 1 once the sweep claimed it (kept when settled)
    progress: str = "lp"  # output tokens delivered, last reported (absent: 0)
    progress_at: str = "la"  # when, epoch ms (absent: `started`)
    output_bound: str = "lb"  # max_output_tokens (-1: none)
    started: str = "l0"  # admitted, epoch ms


class KeySliceFields(NamedTuple):
    """{p}:key:<key_id>: an API key's own limits within its org's (0 = none), and its state."""
    output_rate: str = "or"
    output_capacity: str = "oc"
    input_rate: str = "ir"
    input_capacity: str = "ic"
    daily_tokens: str = "daily"
    max_concurrency: str = "conc"
    output_level: str = "lo"  # a missing level is full
    input_level: str = "li"
    at: str = "t"
    day: str = "d"  # YYYYMMDD of day_used
    day_used: str = "du"


class EstimateFields(NamedTuple):
    """The output estimates settle derives (p95 of recent output lengths), in {p}:org:<org>
    beside OrgFields: the org's, and one per API key with enough history."""
    org: str = "est"
    key_prefix: str = "est:"  # + the key's id


class HistogramFields(NamedTuple):
    """{p}:hist:<org>[:<key_id>]: recent output lengths, a log-spaced histogram (one field per
    bucket index) whose weights grow by 2^(1/half-life) per observation, renormalised now and
    then: older observations count exponentially less."""
    count: str = "n"  # observations ever
    base: str = "z"  # the observation whose weight is 1
    total: str = "w"  # sum of the buckets' weights


class MoneyFields(NamedTuple):
    """{p}:money:<org>: micro-dollars held by open reservations (the org has a spend cap), one
    field per request_id, and their sum."""
    total: str = "#"  # not a valid request_id


class LayoutFields(NamedTuple):
    """How a hash is stored, not what it says. The org's and the pool's hashes carry `hashtable`
    (publishes write it) with a value longer than Redis's hash-max-listpack-value (64 bytes by
    default): such a hash is converted to Redis's hashtable encoding, for good. authorize reads
    8 fields of the org's hash in one HMGET (23 before limits and levels were packed), and in
    the compact listpack encoding each of them is a linear scan of the hash: hashed, the script
    runs ~5 % fewer instructions (316,000 vs 300,000 on Redis 7.0; callgrind,
    bench/script_instructions.py) for ~1 KB more memory per org and pool."""
    hashtable: str = "_ht"
    # The limits authorize reads on every call, packed (cmsgpack) beside the readable fields
    # by the publishes (_common.lua: org_limits_of, pool_limits_of): numbers that need no
    # parsing, in one field. In the org's hash and in the pool's.
    limits: str = "lim"
    # Bucket levels and their time, packed the same way (_buckets.lua: levels_unpack), in the
    # org's hash (BucketFields' values) and in the pool's (HeadroomFields').
    levels: str = "lv"
    # The scheduled changes of the limits (a booking's edges), in the org's hash and in the
    # pool's, packed like `limits`: read once the instant packed at the end of `limits` is due
    # (_buckets.lua: limits_switch). Absent: no change is scheduled.
    next_limits: str = "nlim"


ORG, POOL, BUCKET, HEADROOM, RESERVATION = (OrgFields(), PoolFields(), BucketFields(),
                                            HeadroomFields(), ReservationFields())
KEY_SLICE, ESTIMATE, HISTOGRAM, MONEY, LAYOUT = (KeySliceFields(), EstimateFields(),
                                                 HistogramFields(), MoneyFields(), LayoutFields())
FIELDS = {"org": ORG, "pool": POOL, "bucket": BUCKET, "headroom": HEADROOM, "res": RESERVATION,
          "key": KEY_SLICE, "est": ESTIMATE, "hist": HISTOGRAM, "money": MONEY, "layout": LAYOUT}


class KeyNames(NamedTuple):
    """A pool's keys are "{p<pool>}:<name>[:<part>...]": the hash tag puts them all in one
    Redis Cluster slot, so one script may touch any of them."""
    registry: str = "keys"  # hash: API-key digest -> "<org>:<key_id>:<expires ms, 0 = never>
    #                         :<default tier (KEY_TIERS)>:<1 when the key has a slice>"
    synced: str = "synced"  # set once the pool was rebuilt in full
    pool: str = "pool"  # hash: PoolFields, HeadroomFields
    reservation: str = "res"  # :<request_id>, hash: ReservationFields
    org: str = "org"  # :<org>, hash: OrgFields, BucketFields, EstimateFields
    org_keys: str = "okeys"  # :<org>, set: the org's digests in the registry
    inflight: str = "inflight"  # :<org>, sorted set: request_id by expiry
    day: str = "day"  # :<org>:<YYYYMMDD>, tokens reserved or used that UTC day
    spend: str = "spend"  # :<org>:<YYYYMM>, micro-dollars spent that month
    rebuild: str = "rebuild"  # the rebuild lock: the holder's random token, with a TTL
    money: str = "money"  # :<org>, hash: MoneyFields
    key_slice: str = "key"  # :<key_id>, hash: KeySliceFields
    key_inflight: str = "kinflight"  # :<key_id>, sorted set: request_id by expiry
    histogram: str = "hist"  # :<org>[:<key_id>], hash: HistogramFields
    leases: str = "leases"  # sorted set: request_id of each open lease by when it is due
    # :<signature>, string: the request_id of the lease whose id (reservation_id) ends in it:
    # a heartbeat names leases by id, which is signed, not encrypted. Kept as long as the record.
    lease_id: str = "lid"
    # The admission queue's (admission/engine/queue.py): its orgs with waiters (a sorted set),
    # and the channel told when a pool's capacity frees while they wait.
    queue_orgs: str = "q"
    queue_channel: str = "queue"


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

class Decision(NamedTuple):
    """authorize's reply, field for field in this order. Each header triple (limit, remaining,
    reset) is the tighter of the key's slice and the org's allocation; `tokens_*` is the
    tighter of input and output (the same bucket when input is metered with output). A named
    tuple: decoded once per decision, where a dataclass's __init__ cost several times more."""
    outcome: str  # "allowed", "duplicate", or the refusal code
    org_id: int | None = None
    api_key_id: int | None = None
    reserved_tokens: int = 0  # input and output
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
    reserved_input_tokens: int = 0
    reserved_output_tokens: int = 0
    key_tier: str | None = None  # the key's default service tier (KEY_TIERS)
    scope: str | None = None  # on a refusal by a limit: "org", or "key" (the key's slice)
    limit: str | None = None  # on tps_exceeded / pool_capacity_exhausted: "input", "output"
    input_limit: int = 0
    input_remaining: int = 0
    input_reset_ms: int = 0
    output_limit: int = 0
    output_remaining: int = 0
    output_reset_ms: int = 0
    lease_ttl_ms: int = 0  # a lease's (authorize asked for one): how long it lives unrenewed
    lease_mapped: int = 0  # 1: its id leads to it (else the caller maps it: lease_map)

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
    input_tokens: int
    output_tokens: int = 0
    cached_input_tokens: int = 0  # served from the upstream's cache: not input capacity
    api_key_id: int = 0  # 0: none known
    completed: int = 0  # 1: the output length is a sample of the org's (and key's) estimate
    # The UTC day (YYYYMMDD) the request started: usage without a reservation counts against
    # that day's quota, as a rebuild from PostgreSQL counts it ("": today). A reservation
    # counts on the day it was made.
    day: str = ""
    # When it finished (epoch ms; 0: now). Usage without a reservation owes the TPS buckets only
    # what their rate has not repaid since: a late report does not throttle the present.
    finished_ms: int = 0


# Script arguments. A script taking a list gets one extra key per item (after its KEYS) and the
# item's fields in ARGV (after its ARGV).

class AuthorizeKeys(NamedTuple):
    registry: str
    synced: str
    pool: str
    reservation: str


class AuthorizeArgs(NamedTuple):
    digest: str  # SHA-256 of the API key: Redis never sees a key
    request_id: str
    input_tokens: int
    max_output_tokens: int  # -1: absent (the estimate alone is reserved)
    tier: str  # what the request asked for: auto, priority, default
    key_tier: str  # what the caller believes the key's default tier is, or "unknown"
    pool_tier: str  # this pool's: fast, standard
    now_ms: int
    day: str  # YYYYMMDD (UTC)
    month: str  # YYYYMM
    ttl_ms: int  # how long the reservation holds its slot (a lease's: the pool's lease TTL)
    dry_run: int  # 1: decide, reserve nothing
    record_ttl_ms: int  # how long the reservation's record is kept
    lease_owner: str  # the gateway process holding the reservation as a lease ("": no lease)
    # The signature of the lease's id (its reservation_id), and the "<org>.<key_id>" the caller
    # computed it for (a cached belief about the API key: stored only if it is the key's).
    # "": not known before the decision (the caller then maps it: lease_map).
    lease_id: str
    lease_for: str


class SettleKeys(NamedTuple):
    pool: str


class SettleArgs(NamedTuple):
    now_ms: int
    day: str
    record_ttl_ms: int
    estimate_min_samples: int  # observations before an org's (key's) own estimate is used
    estimate_half_life: int  # observations after which one counts half as much
    estimate_ttl_ms: int  # an idle org's (key's) histogram and estimate are forgotten after it


class LeaseUpdateKeys(NamedTuple):
    pool: str


class LeaseUpdateArgs(NamedTuple):
    now_ms: int
    owner: str  # the gateway process asking
    release: int  # 1: release (the stream ended), 0: renew
    release_grace_ms: int  # a released lease without usage by then is billed from its progress
    record_ttl_ms: int


class LeaseItem(NamedTuple):
    """One lease of a heartbeat or release: the key of its id's signature (KEY.lease_id),
    then these: the org and API key its id names, and its progress."""
    org_id: int
    api_key_id: int  # 0: none
    progress: int  # output tokens delivered so far


# lease_update's answers: the lease's new state, or why it was refused (docs/hook.md).
RENEWED, RELEASED = "renewed", "released"
LEASE_REFUSALS = ("unknown_lease", "lease_expired", "lease_not_yours", "progress_backwards",
                  "progress_beyond_reservation")
LEASE_STATUSES = (RENEWED, RELEASED, *LEASE_REFUSALS)


class LeaseAnswer(NamedTuple):
    """lease_update's reply per lease."""
    status: str  # renewed, released, or the refusal's code
    ttl_ms: int = 0  # renewed: until when it lives from now


class LeaseMapKeys(NamedTuple):
    reservation: str
    lease_id: str


class LeaseMapArgs(NamedTuple):
    request_id: str
    record_ttl_ms: int


class LeaseExpireKeys(NamedTuple):
    leases: str


class LeaseExpireArgs(NamedTuple):
    now_ms: int
    limit: int  # claimed per call at most
    claim_ms: int  # a claim not settled by then is claimed again (the sweep died meanwhile)


class ExpiredLease(NamedTuple):
    """lease_expire's reply per lease claimed: what settling it as interrupted usage needs."""
    request_id: str
    org_id: int
    api_key_id: int  # 0: none
    input_tokens: int  # the reservation's input
    output_tokens: int  # its last progress checkpoint
    started_ms: int
    progress_ms: int  # when the checkpoint was reported (started_ms: never)
    day: str = ""  # YYYYMMDD the reservation counted on


class LookupArgs(NamedTuple):
    now_ms: int


class LookupItem(NamedTuple):
    """One per request_id asked about: its reservation's key, no arguments."""


class SpillMarkKeys(NamedTuple):
    reservation: str


class SpillMarkArgs(NamedTuple):
    org: int
    record_ttl_ms: int


class OrgPublishKeys(NamedTuple):
    registry: str
    pool: str
    org: str
    org_keys: str
    day: str  # today's counter
    spend: str  # this month's counter
    money: str  # the money held by open reservations


class OrgPublishArgs(NamedTuple):
    state: str  # an OrgPublishState as JSON (not a hot call: a readable object beats offsets)


class OrgPublishState(NamedTuple):
    org: dict  # every OrgFields value, by readable name
    pool: dict  # every PoolFields value
    # [{"key_id", "digest", "entry", "slice": every KeySliceFields limit or None,
    #   "day_used": the key's tokens recorded today}]: the org's usable keys
    api_keys: list
    day: str  # YYYYMMDD of day_used
    day_used: int  # tokens recorded today: the floor of a day counter rebuilt after a flush
    month_spend: int  # micro-dollars rated this month: the floor of the month's counter
    month_spend_ttl_s: int  # how long a month's counter lives
    # [[epoch ms, every OrgFields limit from then on, by readable name], ...], in time order:
    # the org's scheduled changes (the latest one past may be among them: the levels meet it
    # on the next call)
    schedule: list
    pool_schedule: list  # the same for the pool's own values (PoolFields)


class PoolPublishKeys(NamedTuple):
    pool: str


class PoolPublishArgs(NamedTuple):
    headroom_rate: int
    headroom_capacity: int
    input_headroom_rate: int
    input_headroom_capacity: int
    estimate_default: int
    estimate_floor: int
    lease_ttl: int  # ms
    schedule: str  # OrgPublishState.pool_schedule, as JSON


class GuaranteeKeys(NamedTuple):
    org: str


class GuaranteeArgs(NamedTuple):
    now_ms: int


class Guarantee(NamedTuple):
    """guarantee's reply: the org's guaranteed tokens/s in force at the instant asked, its
    allocation's and its bookings' (input 0 where input is metered with output)."""
    output_tps: int
    input_tps: int


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
    "settle": Script(keys=SettleKeys, args=SettleArgs, item=Settlement,
                     shared=("buckets", "waiters")),
    "lookup": Script(keys=None, args=LookupArgs, item=LookupItem, reply=HeldReservation),
    "lease_update": Script(keys=LeaseUpdateKeys, args=LeaseUpdateArgs, item=LeaseItem,
                           reply=LeaseAnswer, shared=("waiters",)),
    "lease_map": Script(keys=LeaseMapKeys, args=LeaseMapArgs),
    "lease_expire": Script(keys=LeaseExpireKeys, args=LeaseExpireArgs, reply=ExpiredLease),
    "spill_mark": Script(keys=SpillMarkKeys, args=SpillMarkArgs),
    "org_publish": Script(keys=OrgPublishKeys, args=OrgPublishArgs, shared=("publish",)),
    "pool_publish": Script(keys=PoolPublishKeys, args=PoolPublishArgs, shared=("publish",)),
    "guarantee": Script(keys=GuaranteeKeys, args=GuaranteeArgs, reply=Guarantee,
                        shared=("guarantee",)),
}


@cache
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
    """A reply (a NamedTuple layout) from its fields in order; one short or long is an error,
    not a shifted decode."""
    if len(reply) != len(layout._fields):
        raise ValueError(f"{layout.__name__} has {len(layout._fields)} fields, not {len(reply)}")
    return layout._make(reply)


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


def lua_expand(name: str, source: str, script: Script | None = None) -> str:
    """Replace the script's F, KEY, K and A names with what they stand for (at load time: they
    cost nothing per call). A name the schema does not declare raises LookupError. `script`:
    the declaration of a script built on the engine's outside it (else SCRIPTS[name])."""
    script = script or SCRIPTS[name]
    names = _names(script)

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

    source = _NAME.sub(resolve, source)
    layout = script.reply
    return source if layout is None else _replies_expand(name, layout, source)


# reply{<field> = <expression>, ...}: a script's reply by field name, which lua_expand writes as
# the list itself, in the layout's order with its defaults: no table of names is built and
# collected per call (a 25-field Decision cost authorize ~4 % of its instructions that way).
_REPLY = re.compile(r"\breply\{")


def _replies_expand(script: str, layout: type, source: str) -> str:
    out, at = [], 0
    while match := _REPLY.search(source, at):
        items, end = _table_items(source, match.end())
        out += [source[at:match.start()], _reply_list(script, layout, items)]
        at = end
    return "".join(out) + source[at:]


def _table_items(text: str, start: int) -> tuple[list[str], int]:
    """The items of the table constructor whose body starts at `start` (split at its own commas,
    not those inside brackets or strings; comments left out), and where it ends (after its
    closing brace)."""
    depth, items, item, i = 1, [], [], start
    while depth:
        c = text[i]
        if c in "'\"":  # a string, whole
            end = text.index(c, i + 1) + 1
            item.append(text[i:end])
            i = end
            continue
        if text.startswith("--", i):  # a comment: skipped to the end of its line
            i = text.index("\n", i)
            continue
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
        if (c == "," and depth == 1) or depth == 0:
            items.append("".join(item))
            item = []
        else:
            item.append(c)
        i += 1
    return [entry for entry in items if entry.strip()], i


def _reply_list(script: str, layout: type, items: list[str]) -> str:
    given = {}
    for entry in items:
        field, sep, expression = (part.strip() for part in entry.partition("="))
        if not sep or field not in layout._fields:
            raise LookupError(f"{script}.lua: reply item {entry.strip()!r} is not a field of "
                              f"{layout.__name__}")
        given[field] = expression
    defaults, values = _defaults(layout), []
    for field in layout._fields:
        if field in given:
            values.append(f"({given[field]})" if field not in defaults
                          else f"({given[field]}) or {_lua(defaults[field])}")
        elif field in defaults:
            values.append(_lua(defaults[field]))
        else:
            raise LookupError(f"{script}.lua: a reply without {field} ({layout.__name__})")
    return "{" + ", ".join(values) + "}"


def lua_prelude(name: str) -> str:
    """What a script needs at run time: its list items (ITEMS)."""
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
    return "\n".join(lines) + "\n"
