"""model (+ region) -> pool, without PostgreSQL on every request.

Pools change rarely (operators create them), so each process keeps the table and reloads it
every REFRESH_SECONDS, or on a miss at most once per MISS_RELOAD_SECONDS (so a caller sending
unknown model names cannot turn every request into a query). While PostgreSQL cannot be
reached, the table last read stays in force (authorize must keep answering), and a reload is
tried again at most once per MISS_RELOAD_SECONDS.
"""

import logging
import threading
import time
from dataclasses import dataclass

from django.db import DatabaseError

from quotas.models import CapacityPool, LimiterFailurePolicy

logger = logging.getLogger(__name__)

REFRESH_SECONDS = 30.0
MISS_RELOAD_SECONDS = 1.0


@dataclass(frozen=True)
class PoolRoute:
    pool_id: int
    model: str
    region: str
    fail_open: bool
    speed_floor_output_tps: int
    ttft_ceiling_ms: int


class RouteError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code, self.message = code, message


class _Routes:
    def __init__(self) -> None:
        self.by_id: dict[int, PoolRoute] = {}
        self.loaded_at = float("-inf")
        self.lock = threading.Lock()

    def load(self) -> None:
        pools = CapacityPool.objects.order_by("pk").values_list(
            "pk", "model", "region", "limiter_failure_policy", "speed_floor_output_tps",
            "ttft_ceiling_ms")
        self.by_id = {pk: PoolRoute(pk, model, region, policy == LimiterFailurePolicy.FAIL_OPEN,
                                    floor, ceiling)
                      for pk, model, region, policy, floor, ceiling in pools}
        self.loaded_at = time.monotonic()

    def fresh(self, max_age: float) -> None:
        if time.monotonic() - self.loaded_at > max_age:
            with self.lock:
                if time.monotonic() - self.loaded_at > max_age:
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


def pool_route(*, model: str, region: str | None = None) -> PoolRoute:
    _routes.fresh(REFRESH_SECONDS)
    found = _routes.match(model, region)
    if not found:
        _routes.fresh(MISS_RELOAD_SECONDS)
        found = _routes.match(model, region)
    if not found:
        raise RouteError("unknown_model", f"No pool serves model {model!r}"
                         + (f" in region {region!r}." if region else "."))
    if len(found) > 1:
        regions = sorted(r.region for r in found)
        raise RouteError("region_required",
                         f"Model {model!r} is served in several regions ({', '.join(regions)}); "
                         "say which with `region`.")
    return found[0]


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
