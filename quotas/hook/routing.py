"""model (+ region) + service tier -> the pools to ask, without PostgreSQL on every request.

Pools change rarely (operators create them), so each process keeps the table and reloads it
every REFRESH_SECONDS, or on a miss at most once per MISS_RELOAD_SECONDS (so a caller sending
unknown model names cannot turn every request into a query). While PostgreSQL cannot be
reached, the table last read stays in force (authorize must keep answering), and a reload is
tried again at most once per MISS_RELOAD_SECONDS.

A model may be served in one region by a fast pool and a standard pool. `priority` asks the
fast one only, `default` the standard one only, `auto` the fast one and then (the hook spills)
the standard one. `region` is needed only when the model is served in several regions.
"""

import logging
import threading
import time
from dataclasses import dataclass

from django.db import DatabaseError

from quotas.limiter.aio import Claim, background, in_thread
from quotas.limiter.schema import LEASE_TTL_DEFAULT_MS
from quotas.models import CapacityPool, LimiterFailurePolicy, Tier

logger = logging.getLogger(__name__)

REFRESH_SECONDS = 30.0
MISS_RELOAD_SECONDS = 1.0
# The tiers each requested service tier may be served by, in the order they are asked.
TIERS_SERVING = {"auto": (Tier.FAST, Tier.STANDARD), "priority": (Tier.FAST,),
                 "default": (Tier.STANDARD,)}
# The service tier a response reports, by the tier of the pool that served it (OpenAI's names).
SERVICE_TIER_OF = {Tier.FAST: "priority", Tier.STANDARD: "default"}


@dataclass(frozen=True)
class PoolRoute:
    pool_id: int
    model: str
    region: str
    fail_open: bool
    speed_floor_output_tps: int
    ttft_ceiling_ms: int
    tier: str = Tier.FAST
    output_estimate_default: int = 4096  # what fail-open reserves without max_output_tokens
    lease_ttl_ms: int = LEASE_TTL_DEFAULT_MS  # what a lease admitted here lives unrenewed
    queue_max_wait_ms: int = 0  # the admission queue's longest wait (0: no queue)


class RouteError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


class _Routes:
    def __init__(self) -> None:
        self.by_id: dict[int, PoolRoute] = {}
        # (model, region, service tier) -> the routes to ask, as pool_routes_for found them.
        self.asked: dict[tuple, list[PoolRoute]] = {}
        self.loaded_at = float("-inf")
        self.reload = Claim()
        self.lock = threading.Lock()

    def load(self) -> None:
        pools = CapacityPool.objects.order_by("pk").values_list(
            "pk", "model", "region", "limiter_failure_policy", "speed_floor_output_tps",
            "ttft_ceiling_ms", "tier", "output_estimate_default", "lease_ttl_seconds",
            "queue_max_wait_ms")
        self.by_id = {pk: PoolRoute(pk, model, region, policy == LimiterFailurePolicy.FAIL_OPEN,
                                    floor, ceiling, tier, estimate, lease_s * 1000, queue)
                      for pk, model, region, policy, floor, ceiling, tier, estimate, lease_s,
                      queue
                      in pools}
        self.asked = {}
        self.loaded_at = time.monotonic()

    def stale(self, max_age: float) -> bool:
        return time.monotonic() - self.loaded_at > max_age

    def fresh(self, max_age: float) -> None:
        if self.stale(max_age):
            with self.lock:
                if self.stale(max_age):
                    self._reload()

    def _reload(self) -> None:
        try:
            self.load()
        except DatabaseError:
            if not self.by_id:
                raise  # nothing to go on
            logger.warning("pool routes: PostgreSQL unreachable, keeping the table read before")
            self.loaded_at = time.monotonic() - REFRESH_SECONDS + MISS_RELOAD_SECONDS

    def match(self, model: str, region: str | None) -> list[PoolRoute]:
        return [r for r in self.by_id.values()
                if r.model == model and (region is None or r.region == region)]


_routes = _Routes()


def pool_routes_for(*, model: str, region: str | None = None,
                    service_tier: str = "auto") -> list[PoolRoute]:
    """The pools that may serve the request, in the order to ask them (the fast one first).
    RouteError `unknown_model` when none serves the model (in that region, on those tiers),
    `region_required` when it is served in several regions and none was named."""
    _routes.fresh(REFRESH_SECONDS)
    asked = _routes.asked.get((model, region, service_tier))
    if asked is not None:
        return asked
    found = _routes.match(model, region)
    if not found:
        _routes.fresh(MISS_RELOAD_SECONDS)
        found = _routes.match(model, region)
    regions = sorted({r.region for r in found})
    if len(regions) > 1:
        raise RouteError("region_required",
                         f"Model {model!r} is served in several regions ({', '.join(regions)}); "
                         "say which with `region`.")
    tiers = TIERS_SERVING[service_tier]
    found = sorted((r for r in found if r.tier in tiers), key=lambda r: tiers.index(r.tier))
    if not found:
        where = f" in region {region!r}" if region else ""
        tier = "" if service_tier == "auto" else f" on service tier {service_tier!r}"
        raise RouteError("unknown_model", f"No pool serves model {model!r}{where}{tier}.")
    if len(_routes.asked) < 10_000:  # callers choose the names: bound what they can add
        _routes.asked[(model, region, service_tier)] = found
    return found


async def pool_routes(*, model: str, region: str | None = None,
                      service_tier: str = "auto") -> list[PoolRoute]:
    """pool_routes_for on the event loop: what it found before is answered from memory (a
    table past REFRESH_SECONDS is reloaded in the background meanwhile); a first load, or a
    question not asked before, waits in a thread (it may read PostgreSQL)."""
    if _routes.by_id:
        if _routes.stale(REFRESH_SECONDS) and _routes.reload.take(_routes.loaded_at):
            background(_routes.fresh, max_age=REFRESH_SECONDS)
        asked = _routes.asked.get((model, region, service_tier))
        if asked is not None:
            return asked
    return await in_thread(pool_routes_for, model=model, region=region,
                           service_tier=service_tier)


def pool_route_by_id(pool_id: int) -> PoolRoute | None:
    _routes.fresh(REFRESH_SECONDS)
    if pool_id not in _routes.by_id:
        _routes.fresh(MISS_RELOAD_SECONDS)
    return _routes.by_id.get(pool_id)


def pool_routes_all() -> list[PoolRoute]:
    _routes.fresh(REFRESH_SECONDS)
    return list(_routes.by_id.values())


def pool_routes_reload() -> None:
    with _routes.lock:
        _routes.load()
