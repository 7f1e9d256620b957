"""Calendar months in UTC, named by their first day: what invoices bill and usage partitions
hold."""

from datetime import UTC, date, datetime


def month_of(moment: datetime) -> date:
    moment = moment.astimezone(UTC)
    return date(moment.year, moment.month, 1)


def month_after(month: date) -> date:
    return date(month.year + month.month // 12, month.month % 12 + 1, 1)


def month_before(month: date) -> date:
    return date(month.year - (month.month == 1), (month.month - 2) % 12 + 1, 1)
