"""A service's refusal on a server-rendered form (admin, console, portal)."""

from django import forms

from sluice.errors import DomainError


def form_add_domain_error(*, form: forms.BaseForm, error: DomainError) -> None:
    """Each field the service named gets its problems (a field the form does not show: the
    whole form gets them); a refusal that names no field puts its message on the whole form."""
    for name, problems in error.fields.items():
        form.add_error(name if name in form.fields else None, problems)
    if not error.fields:
        form.add_error(None, error.message)
