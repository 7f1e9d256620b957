from django import template

register = template.Library()


@register.filter
def audit_changes(event) -> list[str]:
    """An event's before/after as one line per field: "status: applied → in_review"."""
    before, after = event.before or {}, event.after or {}
    lines = []
    for field in dict.fromkeys([*before, *after]):
        old, new = before.get(field), after.get(field)
        if field in before and field in after:
            if old != new:
                lines.append(f"{field}: {old} → {new}")
        elif field in after:
            lines.append(f"{field}: {new}")
        else:
            lines.append(f"{field}: {old} (removed)")
    return lines
