"""Admin plumbing so that every admin write goes through a service.

`ServiceAdminMixin` runs the service while the admin form validates, so a domain error (an
illegal transition, no capacity left) appears on the form like any validation error instead of
a 500, and nothing is written. The admin view already wraps the request in a transaction.
"""

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.db import transaction

from sluice.errors import DomainError


class ServiceAdminMixin:
    def service_save(self, *, request, obj, data: dict, change: bool):
        raise NotImplementedError  # each ModelAdmin says which service creates/changes its rows

    def get_form(self, request, obj=None, change=False, **kwargs):
        base = super().get_form(request, obj, change=change, **kwargs)
        model_admin = self

        class ServiceForm(base):
            def _post_clean(self):
                # After the model's own validation (uniqueness included), run the service.
                super()._post_clean()
                if self.errors:
                    return
                try:
                    # Savepoint: a refused service call leaves nothing behind.
                    with transaction.atomic():
                        self.service_result = model_admin.service_save(
                            request=request, obj=obj, data=self.cleaned_data,
                            change=obj is not None)
                except DomainError as exc:
                    self.add_error(None, ValidationError(exc.message, code=exc.code))

        return ServiceForm

    def save_model(self, request, obj, form, change):
        saved = form.service_result
        obj.pk = saved.pk
        obj.refresh_from_db()

    def save_related(self, request, form, formsets, change):
        pass  # services own every write, inlines are read-only


def run_service_on_each(model_admin, request, queryset, service, verb: str, *, arg: str,
                        **kwargs) -> None:
    """Apply one service per selected row; report successes, and each failure by name."""
    done, failed = 0, []
    for obj in queryset:
        try:
            service(actor=request.user, **{arg: obj}, **kwargs)
            done += 1
        except DomainError as exc:
            failed.append(f"{obj}: {exc.message}")
    if done:
        model_admin.message_user(request, f"{verb}: {done}.", messages.SUCCESS)
    for failure in failed:
        model_admin.message_user(request, failure, messages.ERROR)
