"""Time buckets and page cursors in the shape of OpenAI's organization Usage and Costs APIs.

Buckets are aligned to UTC: `start_time` is rounded down and `end_time` up to the bucket width,
so a minute, hour or day bucket always starts on a whole minute, hour or UTC day (that is what
the hourly rollups and invoices count in). A page holds at most `limit` consecutive buckets, and
every bucket in it is listed, empty or not; `next_page` is the start of the page after it, as an
opaque string. A request's range is unbounded: it is walked page by page, so the work of one
call is bounded by the page (1,440 minutes, 168 hours or 31 days at most)."""

from dataclasses import dataclass
from datetime import UTC, datetime

WIDTH_SECONDS = {"1m": 60, "1h": 3600, "1d": 86_400}
# bucket width -> (default, maximum) buckets per page: OpenAI's figures.
PAGE_LIMITS = {"1m": (60, 1440), "1h": (24, 168), "1d": (7, 31)}
CURSOR_PREFIX = "page_"


class BucketError(ValueError):
    """Input that names no valid window: the API answers 400 with `field`."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field, self.message = field, message


@dataclass(frozen=True)
class BucketPage:
    width: str
    starts: tuple[int, ...]  # epoch seconds of each bucket's start
    next_page: str | None

    @property
    def seconds(self) -> int:
        return WIDTH_SECONDS[self.width]

    @property
    def start(self) -> datetime:
        return datetime.fromtimestamp(self.starts[0], tz=UTC)

    @property
    def end(self) -> datetime:
        return datetime.fromtimestamp(self.starts[-1] + self.seconds, tz=UTC)


def bucket_page(*, width: str, start_time: int, end_time: int, limit: int | None,
                page: str | None, limits: tuple[int, int] | None = None) -> BucketPage:
    """The buckets of one page of [start_time, end_time) (unix seconds). `limits` (default,
    maximum buckets per page) replaces the width's usual ones (the Costs API allows 180 days)."""
    seconds = WIDTH_SECONDS[width]
    default_limit, max_limit = limits or PAGE_LIMITS[width]
    limit = default_limit if limit is None else limit
    if not 1 <= limit <= max_limit:
        raise BucketError("limit", f"limit must be 1-{max_limit} for bucket_width={width}.")
    if end_time <= start_time:
        raise BucketError("end_time", "end_time must be after start_time.")
    first = start_time // seconds * seconds
    end = -(-end_time // seconds) * seconds
    if page is not None:
        cursor = page.removeprefix(CURSOR_PREFIX)
        if not (page.startswith(CURSOR_PREFIX) and cursor.isdigit()) \
                or not first <= int(cursor) < end or (int(cursor) - first) % seconds:
            raise BucketError("page", "page is not a next_page of this query.")
        first = int(cursor)
    last = min(end, first + limit * seconds)
    more = last < end
    return BucketPage(width=width, starts=tuple(range(first, last, seconds)),
                      next_page=f"{CURSOR_PREFIX}{last}" if more else None)


def bucket_envelope(page: BucketPage, results: dict[int, list[dict]]) -> dict:
    """{"object": "page", "data": [buckets], "has_more", "next_page"} with every bucket listed."""
    return {
        "object": "page",
        "data": [{"object": "bucket", "start_time": start, "end_time": start + page.seconds,
                  "results": results.get(start, [])} for start in page.starts],
        "has_more": page.next_page is not None,
        "next_page": page.next_page,
    }
