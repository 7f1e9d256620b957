"""`{% messages_at "place" %}`: the messages flashed for one section of the page
(sluice/messages.py); `{% messages_at %}` in the layout shows those without a place."""

from django import template
from django.contrib.messages import get_messages

from sluice.messages import message_place

register = template.Library()


@register.inclusion_tag("_messages.html", takes_context=True)
def messages_at(context, place: str = ""):
    request = context["request"]
    # Read the storage once per request: iterating it marks every message as shown.
    if not hasattr(request, "_sluice_messages"):
        request._sluice_messages = list(get_messages(request))
    return {"flashed": [m for m in request._sluice_messages if message_place(m) == place]}
