"""How figures are written on both sites, in one place: thousands separators, counts as
integers, rates with one decimal, a dash where nothing was measured. Money has its own filters
in billing (`billing_money`: cents, micros, per_mtok), which format exact integer amounts.
static/charts.js writes the numbers of the charts' axes and hover values the same way."""

from decimal import ROUND_HALF_UP, Decimal

from django import template

register = template.Library()

DASH = "–"  # nothing measured: no requests, no first token


def _decimal(value) -> Decimal | None:
    if value is None or value == "":
        return None
    try:
        return Decimal(str(value))
    except ArithmeticError:
        return None


def _fixed(value, places: int) -> str:
    number = _decimal(value)
    if number is None:
        return DASH
    exponent = Decimal(1).scaleb(-places)
    return f"{number.quantize(exponent, rounding=ROUND_HALF_UP):,.{places}f}"


@register.filter
def count(value) -> str:
    """Requests, tokens, organizations: 345600000 -> "345,600,000", 32.0 -> "32"."""
    return _fixed(value, 0)


@register.filter
def rate(value) -> str:
    """Tokens per second and other averages: 573.94 -> "573.9", 121000 -> "121,000.0"."""
    return _fixed(value, 1)


@register.filter
def percent(ratio, places: int = 0) -> str:
    """A share from 0 to 1: 0.5637 -> "56%" (places=1: "56.4%")."""
    number = _decimal(ratio)
    return DASH if number is None else f"{_fixed(number * 100, int(places))}%"


@register.filter
def ms(value) -> str:
    """A duration in milliseconds: 412.6 -> "413 ms"."""
    text = _fixed(value, 0)
    return text if text == DASH else f"{text} ms"
