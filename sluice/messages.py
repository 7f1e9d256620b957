"""Messages shown where the action was. A view whose form sits in one section of a long page
adds its message with `flash(..., at="allocations")` and redirects with `redirect_at(...,
at="allocations")`: the browser comes back to that section (its id), which renders the message
with `{% messages_at "allocations" %}` (templatetags/flash.py). Messages without a place show
at the top of the page."""

from django.contrib import messages
from django.http import HttpResponseRedirect
from django.shortcuts import resolve_url

PLACE_PREFIX = "at-"


def flash(request, level: int, text: str, *, at: str = "") -> None:
    messages.add_message(request, level, text, extra_tags=f"{PLACE_PREFIX}{at}" if at else "")


def redirect_at(to, *args, at: str) -> HttpResponseRedirect:
    return HttpResponseRedirect(f"{resolve_url(to, *args)}#{at}")


def message_place(message) -> str:
    tags = (message.extra_tags or "").split()
    return next((t[len(PLACE_PREFIX):] for t in tags if t.startswith(PLACE_PREFIX)), "")
