"""`booking|booking_phase`: a booking's state as the clock has it (the stored one follows the
beat within a minute)."""

from django import template
from django.utils import timezone

register = template.Library()


@register.filter
def booking_phase(booking) -> str:
    return booking.phase_at(timezone.now())
