"""Parsing of hook API bodies. Hand-written rather than DRF serializers because it runs on
every inference request; every malformed field is reported at once, in the shared error format
(`fields`), and nothing is written."""

import re
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

import orjson

# Matched with fullmatch(): `$` alone also matches before a trailing newline ("abc\n").
REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
# A gateway process's id (a lease's holder): a uuid4 hex per process is fine.
GATEWAY_PROCESS = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
MAX_TOKENS = 10_000_000
MAX_EVENTS = 1000
AUTHORIZE_BATCH_MAX = 100  # requests in one batched authorize
# A usage batch nests three deep (object, events list, event); nothing valid nests deeper.
MAX_DEPTH = 8
# interrupted: a stream whose gateway died, billed from its last progress (a replacement
# process reporting from the spool, or Sluice's sweep of an expired lease, docs/hook.md).
USAGE_STATUSES = ("completed", "failed", "cancelled", "interrupted")


class BadInput(Exception):
    def __init__(self, message: str, *, code: str = "invalid_input", fields: dict | None = None):
        super().__init__(message)
        self.code, self.message, self.fields = code, message, fields


def json_body(raw: bytes) -> object:
    # orjson (C): a sixth of json.loads's time on an authorize body, and a usage batch of 1,000
    # events. It refuses what JSON does not allow (NaN, integers past 64 bits, nesting deeper
    # than 1,024): a 400 like any other body that is not JSON.
    try:
        return orjson.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadInput(f"The body is not JSON: {exc}", code="malformed_request") from exc


def _nests_deeper(value: object, limit: int) -> bool:
    """Whether `value` nests lists and objects more than `limit` deep (iterative: orjson
    accepts 1,024 levels, more than Python's recursion limit)."""
    stack = [(value, 1)]
    while stack:
        value, depth = stack.pop()
        children = (value.values() if isinstance(value, dict)
                    else value if isinstance(value, list) else ())
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > limit:
                    return True
                stack.append((child, depth + 1))
    return False


def _refuse(body: object, fields: dict) -> BadInput:
    """The error of a body that fails validation. Checked only then (a valid body cannot nest
    deep: every field is a scalar), so well-formed requests pay nothing for it."""
    if _nests_deeper(body, MAX_DEPTH):
        return BadInput(f"The body nests deeper than {MAX_DEPTH} levels.",
                        code="malformed_request")
    return BadInput("The request is invalid.", fields=fields)


class _Fields:
    """Collects per-field errors while reading one JSON object."""

    def __init__(self, body: object):
        if not isinstance(body, dict):
            raise BadInput("The body must be a JSON object.", code="malformed_request")
        self.body, self.errors = body, {}

    def _fail(self, name: str, message: str) -> None:
        self.errors[name] = [message]

    def text(self, name: str, *, pattern=None, max_length=256, required=True) -> str | None:
        value = self.body.get(name)
        if value is None:
            if required:
                self._fail(name, "This field is required.")
            return None
        if not isinstance(value, str) or not value or len(value) > max_length:
            self._fail(name, f"Must be a non-empty string of at most {max_length} characters.")
        elif pattern is not None and not pattern.fullmatch(value):
            self._fail(name, "Must be 1-128 characters of A-Z a-z 0-9 . _ : -")
        else:
            return value
        return None

    def absent_or_text(self, name: str, *, max_length: int) -> str | None:
        """An optional string that, when present, is a string: null is not "absent"."""
        if name in self.body and self.body[name] is None:
            self._fail(name, f"Must be a non-empty string of at most {max_length} characters; "
                       "leave the field out when there is none.")
            return None
        return self.text(name, max_length=max_length, required=False)

    def integer(self, name: str, *, minimum: int, default: int | None = None,
                required: bool = True) -> int | None:
        value = self.body.get(name)
        if value is None and not required:
            return default
        if type(value) is not int or not minimum <= value <= MAX_TOKENS:
            self._fail(name, f"Must be an integer from {minimum} to {MAX_TOKENS}.")
            return None
        return value

    def boolean(self, name: str) -> bool:
        value = self.body.get(name, False)
        if not isinstance(value, bool):
            self._fail(name, "Must be true or false.")
            return False
        return value

    def moment(self, name: str, *, required=True) -> datetime | None:
        value = self.body.get(name)
        if value is None:
            if required:
                self._fail(name, "This field is required.")
            return None
        try:
            parsed = datetime.fromisoformat(value) if isinstance(value, str) else None
        except ValueError:
            parsed = None
        if parsed is None or parsed.tzinfo is None:
            self._fail(name, "Must be an ISO 8601 timestamp with a time zone.")
            return None
        return parsed

    def choice(self, name: str, choices: tuple[str, ...], *, default: str | None = None
               ) -> str | None:
        value = self.body.get(name, default)
        if value not in choices:
            self._fail(name, f"Must be one of: {', '.join(choices)}.")
            return None
        return value


# OpenAI's vocabulary (`flex` is not served): auto = the key's default, else fast first and
# standard when the fast pool refuses; priority = fast pools only; default = standard only.
SERVICE_TIERS = ("auto", "priority", "default")


class AuthorizeInput(NamedTuple):
    """A named tuple: built once per inference request, where a frozen dataclass's __init__
    cost several times more."""
    request_id: str
    api_key: str
    model: str
    region: str | None
    input_tokens: int
    max_output_tokens: int | None  # None: reserve the output estimate alone
    dry_run: bool
    service_tier: str = "auto"
    # The gateway process that holds the reservation as a lease (the request asked for one:
    # `lease` true, `gateway_process`), else "".
    lease_owner: str = ""
    queue_threshold_ms: int = -1  # how long it may wait for capacity; -1: absent (defaults)


# Cerebras' queue_threshold range: 0 (never wait) or 50 to 20,000 ms.
QUEUE_THRESHOLD_MS = (50, 20_000)


def _queue_threshold(value: object) -> int | None:
    """A valid queue_threshold_ms, -1 when absent, None when invalid."""
    if value is None:
        return -1
    if type(value) is not int or not (value == 0 or QUEUE_THRESHOLD_MS[0] <= value
                                      <= QUEUE_THRESHOLD_MS[1]):
        return None
    return value


def _authorize_input_fast(body: object) -> AuthorizeInput | None:
    """The input when every field is well-formed, else None (then `authorize_input` says
    what is wrong). The same rules as `_Fields` applies field by field below, in one
    expression: well-formed is the case of every inference request, and the per-field
    bookkeeping was most of the parsing's cost. tests/quotas/hook/test_authorize_input.py holds
    the two to the same answers."""
    if type(body) is not dict:
        return None
    get = body.get
    request_id, api_key, model = get("request_id"), get("api_key"), get("model")
    region, input_tokens, max_output = get("region"), get("input_tokens"), get("max_output_tokens")
    dry_run, tier = get("dry_run", False), get("service_tier", "auto")
    queue = _queue_threshold(get("queue_threshold_ms"))
    lease, process = get("lease", False), get("gateway_process")
    if (queue is None or type(request_id) is not str or not 0 < len(request_id) <= 128
            or REQUEST_ID.fullmatch(request_id) is None
            or type(api_key) is not str or not 0 < len(api_key) <= 256
            or type(model) is not str or not 0 < len(model) <= 100
            or (region is not None and (type(region) is not str or not 0 < len(region) <= 50))
            or type(input_tokens) is not int or not 0 <= input_tokens <= MAX_TOKENS
            or (max_output is not None
                and (type(max_output) is not int or not 1 <= max_output <= MAX_TOKENS))
            or type(dry_run) is not bool or tier not in SERVICE_TIERS
            or type(lease) is not bool
            or (process is not None and (type(process) is not str
                                         or GATEWAY_PROCESS.fullmatch(process) is None))
            or (lease and process is None)):
        return None
    return AuthorizeInput(request_id, api_key, model, region, input_tokens, max_output, dry_run,
                          tier, process if lease else "", queue)


def authorize_input(body: object) -> AuthorizeInput:
    return _authorize_input_fast(body) or _authorize_input_checked(body)


def authorize_batch_input(body: object) -> list:
    """A batched authorize's requests (each checked as /authorize checks its body, alone)."""
    requests = body.get("requests") if isinstance(body, dict) else None
    if not isinstance(requests, list) or not 1 <= len(requests) <= AUTHORIZE_BATCH_MAX:
        if not isinstance(body, dict):
            raise BadInput("The body must be a JSON object.", code="malformed_request")
        raise BadInput("The request is invalid.", fields={"requests": [
            f"A list of 1 to {AUTHORIZE_BATCH_MAX} authorize bodies."]})
    return requests


def _lease_owner(f: "_Fields") -> str:
    lease = f.boolean("lease")
    process = f.text("gateway_process", max_length=64, required=False)
    if process is not None and not GATEWAY_PROCESS.fullmatch(process):
        f.errors["gateway_process"] = ["Must be 1-64 characters of A-Z a-z 0-9 . _ : -"]
    elif lease and process is None and "gateway_process" not in f.errors:
        f.errors["gateway_process"] = ["Required with lease: the gateway process holding it."]
    return (process or "") if lease else ""


def _authorize_input_checked(body: object) -> AuthorizeInput:
    """Field by field: every malformed field is named (BadInput)."""
    f = _Fields(body)
    parsed = AuthorizeInput(
        request_id=f.text("request_id", pattern=REQUEST_ID, max_length=128),
        api_key=f.text("api_key"), model=f.text("model", max_length=100),
        region=f.text("region", max_length=50, required=False),
        input_tokens=f.integer("input_tokens", minimum=0),
        max_output_tokens=f.integer("max_output_tokens", minimum=1, required=False),
        dry_run=f.boolean("dry_run"),
        service_tier=f.choice("service_tier", SERVICE_TIERS, default="auto"),
        queue_threshold_ms=_queue_threshold(f.body.get("queue_threshold_ms")),
        lease_owner=_lease_owner(f),
    )
    if parsed.queue_threshold_ms is None:
        low, high = QUEUE_THRESHOLD_MS
        f.errors["queue_threshold_ms"] = [f"Must be 0 or an integer from {low} to {high}."]
        if len(f.errors) == 1:
            raise BadInput("queue_threshold_ms must be 0 or an integer from "
                           f"{low} to {high} (milliseconds).", code="invalid_queue_threshold",
                           fields=f.errors)
    if f.errors:
        raise _refuse(body, f.errors)
    return parsed


# slots, not frozen: a batch builds up to 1,000 of these, and a frozen dataclass's __init__
# costs several times a plain one's. Treat it as read-only all the same.
@dataclass(slots=True)
class UsageInput:
    request_id: str
    reservation_id: str | None
    input_tokens: int
    output_tokens: int
    status: str
    started_at: datetime
    first_token_at: datetime | None
    finished_at: datetime
    cached_input_tokens: int = 0  # of input_tokens, served from the upstream's cache
    queued_ms: int | None = None  # how long it waited in the admission queue (absent: none)


def _usage_event(body: object) -> tuple[UsageInput | None, dict]:
    f = _Fields(body)
    event = UsageInput(
        request_id=f.text("request_id", pattern=REQUEST_ID, max_length=128),
        reservation_id=f.absent_or_text("reservation_id", max_length=128),
        input_tokens=f.integer("input_tokens", minimum=0),
        output_tokens=f.integer("output_tokens", minimum=0),
        status=f.choice("status", USAGE_STATUSES),
        started_at=f.moment("started_at"), first_token_at=f.moment("first_token_at",
                                                                   required=False),
        finished_at=f.moment("finished_at"),
        cached_input_tokens=f.integer("cached_input_tokens", minimum=0, default=0,
                                      required=False),
        queued_ms=f.integer("queued_ms", minimum=0, required=False),
    )
    # The order and window of the timestamps are checked per event at ingestion
    # (metering/usage.py `_timely`): a bad one is rejected alone, not its whole batch.
    if not f.errors and event.cached_input_tokens > event.input_tokens:
        f.errors["cached_input_tokens"] = ["Must not exceed input_tokens."]
    return (None if f.errors else event), f.errors


_ABSENT = object()


def _usage_event_fast(item: object) -> UsageInput | None:
    """The event when every field is well-formed, else None (then `_usage_event` says what
    is wrong). The same rules as `_usage_event`, checked in one expression: a batch of 1,000
    well-formed events is the common case, and per-field bookkeeping was most of its cost."""
    if type(item) is not dict:
        return None
    get = item.get
    request_id, reservation_id = get("request_id"), get("reservation_id", _ABSENT)
    input_tokens, output_tokens = get("input_tokens"), get("output_tokens")
    status, started, first, finished = (get("status"), get("started_at"),
                                        get("first_token_at"), get("finished_at"))
    cached, queued = get("cached_input_tokens", 0), get("queued_ms")
    if ((queued is not None and (type(queued) is not int or not 0 <= queued <= MAX_TOKENS))
            or type(request_id) is not str or not 0 < len(request_id) <= 128
            or REQUEST_ID.fullmatch(request_id) is None
            or (reservation_id is not _ABSENT  # present: a non-empty string, never null
                and (type(reservation_id) is not str or not 0 < len(reservation_id) <= 128))
            or type(input_tokens) is not int or not 0 <= input_tokens <= MAX_TOKENS
            or type(output_tokens) is not int or not 0 <= output_tokens <= MAX_TOKENS
            or type(cached) is not int or not 0 <= cached <= input_tokens
            or status not in USAGE_STATUSES
            or type(started) is not str or type(finished) is not str
            or (first is not None and type(first) is not str)):
        return None
    try:
        started_at, finished_at = datetime.fromisoformat(started), datetime.fromisoformat(finished)
        first_token_at = datetime.fromisoformat(first) if first is not None else None
    except ValueError:
        return None
    if (started_at.tzinfo is None or finished_at.tzinfo is None
            or (first_token_at is not None and first_token_at.tzinfo is None)):
        return None
    return UsageInput(request_id, None if reservation_id is _ABSENT else reservation_id,
                      input_tokens, output_tokens, status,
                      started_at, first_token_at, finished_at, cached, queued)


def usage_input(body: object) -> list[UsageInput]:
    """One event, or {"events": [...]} with 1 to MAX_EVENTS events. All or nothing."""
    batched = isinstance(body, dict) and "events" in body
    if batched:
        items = body["events"]
        if not isinstance(items, list) or not 1 <= len(items) <= MAX_EVENTS:
            raise _refuse(body, {"events": [f"Must be a list of 1 to {MAX_EVENTS} events."]})
    else:
        items = [body]
    events, errors = [], {}
    for index, item in enumerate(items):
        event = _usage_event_fast(item)
        if event is not None:
            events.append(event)
            continue
        try:
            event, item_errors = _usage_event(item)
        except BadInput as exc:
            event, item_errors = None, {"non_field_errors": [exc.message]}
        if item_errors:
            errors[str(index)] = item_errors
        events.append(event)
    if errors:
        raise _refuse(body, errors["0"] if not batched else {"events": errors})
    return events

