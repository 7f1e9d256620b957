from django import template

from billing.money import format_cents, format_micros, format_micros_exact, format_per_mtok

register = template.Library()
register.filter("cents", format_cents)
register.filter("micros", format_micros)
register.filter("micros_exact", format_micros_exact)
register.filter("per_mtok", format_per_mtok)
