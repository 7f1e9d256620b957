"""The limiter's clock. Tests freeze and advance it (UTC day rollover, reservation expiry)
instead of sleeping; production reads the wall clock."""

import time
from datetime import UTC, datetime, timedelta
from functools import lru_cache


class Clock:
    def __init__(self) -> None:
        self._frozen: datetime | None = None

    def now(self) -> datetime:
        return self._frozen or datetime.now(UTC)

    def now_ms(self) -> int:
        """epoch_ms(now()), without making a datetime (authorize asks on every request)."""
        return time.time_ns() // 1_000_000 if self._frozen is None else epoch_ms(self._frozen)

    def freeze(self, at: datetime) -> None:
        self._frozen = at

    def advance(self, **delta: float) -> None:
        self._frozen = self.now() + timedelta(**delta)

    def unfreeze(self) -> None:
        self._frozen = None


clock = Clock()


def epoch_ms(at: datetime) -> int:
    return int(at.timestamp() * 1000)


def day_stamp(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y%m%d")


def day_stamp_of_ms(ms: int) -> str:
    """The UTC day (YYYYMMDD) of epoch ms `ms`, formatted once per day: a usage batch's
    events fall on a day or two."""
    return _day_stamp_of(ms // _DAY_MS)


@lru_cache(maxsize=64)
def _day_stamp_of(day_number: int) -> str:
    return day_stamp(datetime.fromtimestamp(day_number * 86_400, UTC))


def month_stamp(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y%m")


def ms_until_next_utc_day(at: datetime) -> int:
    at = at.astimezone(UTC)
    midnight = (at + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    return int((midnight - at).total_seconds() * 1000)


_DAY_MS = 86_400_000
_today: tuple[int, str, str] = (-1, "", "")  # the UTC day's first epoch ms, YYYYMMDD, YYYYMM


def time_stamps(ms: int) -> tuple[str, str]:
    """The UTC day (YYYYMMDD) and month (YYYYMM) of epoch ms `ms`, formatted once a day:
    authorize needs both on every request."""
    global _today
    start, day, month = _today
    if not start <= ms < start + _DAY_MS:
        start = ms - ms % _DAY_MS
        at = datetime.fromtimestamp(start // 1000, UTC)
        day, month = day_stamp(at), month_stamp(at)
        _today = (start, day, month)
    return day, month
