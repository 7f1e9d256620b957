"""Billing months are calendar months in UTC."""

from datetime import UTC, date, datetime


def month_of(moment: datetime) -> date:
    moment = moment.astimezone(UTC)
    return date(moment.year, moment.month, 1)


def month_after(month: date) -> date:
    return date(month.year + month.month // 12, month.month % 12 + 1, 1)


def month_before(month: date) -> date:
    return date(month.year - (month.month == 1), (month.month - 2) % 12 + 1, 1)


def month_bounds(month: date) -> tuple[datetime, datetime]:
    """[start, end) of the month as UTC datetimes, to filter hourly rollups."""
    start = datetime(month.year, month.month, 1, tzinfo=UTC)
    end_month = month_after(month)
    return start, datetime(end_month.year, end_month.month, 1, tzinfo=UTC)


def month_parse(text: str) -> date:
    """'2026-11' -> date(2026, 11, 1); ValueError otherwise."""
    year, _, month = text.partition("-")
    return date(int(year), int(month), 1)
