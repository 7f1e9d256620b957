from django import template

register = template.Library()


@register.filter
def cents(value: int) -> str:
    """1234 -> "$12.34", -5 -> "−$0.05". Integer arithmetic: no float ever touches money."""
    sign = "−" if value < 0 else ""
    whole, part = divmod(abs(int(value)), 100)
    return f"{sign}${whole:,}.{part:02d}"


@register.filter
def per_mtok(micros: int) -> str:
    """Micro-dollars per million tokens -> "$5.00 / Mtok"."""
    whole, part = divmod(int(micros), 1_000_000)
    return f"${whole:,}.{part:06d}".rstrip("0").rstrip(".") + " / Mtok" if micros else ""
