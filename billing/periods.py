"""Billing months are calendar months in UTC (sluice/months.py)."""

from datetime import UTC, date, datetime

from sluice.months import month_after, month_before, month_of

__all__ = ["month_after", "month_before", "month_bounds", "month_of", "month_parse"]


def month_bounds(month: date) -> tuple[datetime, datetime]:
    """[start, end) of the month as UTC datetimes, to filter hourly rollups."""
    start = datetime(month.year, month.month, 1, tzinfo=UTC)
    end_month = month_after(month)
    return start, datetime(end_month.year, end_month.month, 1, tzinfo=UTC)


def month_parse(text: str) -> date:
    """'2026-11' -> date(2026, 11, 1); ValueError otherwise."""
    year, _, month = text.partition("-")
    return date(int(year), int(month), 1)
