"""Display of money. Integer arithmetic only: no float ever touches an amount."""


def format_cents(value: int, *, minus: str = "−") -> str:
    """1234 -> "$12.34", -5 -> "−$0.05"."""
    sign = minus if value < 0 else ""
    whole, part = divmod(abs(int(value)), 100)
    return f"{sign}${whole:,}.{part:02d}"


def format_per_mtok(micros: int) -> str:
    """Micro-dollars per million tokens -> "$5 / Mtok", "$0.5 / Mtok"; "" for 0."""
    if not micros:
        return ""
    whole, part = divmod(int(micros), 1_000_000)
    return f"${whole:,}.{part:06d}".rstrip("0").rstrip(".") + " / Mtok"


def format_micros_exact(micros: int) -> str:
    """Micro-dollars with as many decimals as they need: 4_000 -> "$0.004", 20_000 -> "$0.02"."""
    sign = "−" if micros < 0 else ""
    whole, part = divmod(abs(int(micros)), 1_000_000)
    text = f"{whole:,}.{part:06d}".rstrip("0")
    return f"{sign}${text}{'00' if text.endswith('.') else ''}"


def format_micros(micros: int) -> str:
    """Micro-dollars -> dollars and cents, halves rounded away from zero: 12_345_000 -> "$12.35"."""
    cents, rest = divmod(abs(int(micros)), 10_000)
    cents += rest >= 5_000
    return format_cents(cents if micros >= 0 else -cents)
