"""Admin plumbing so that every admin write goes through a service.

A ModelAdmin whose rows are added or edited in the admin uses `ServiceAdminMixin` (or
`AddOnlyAdminMixin`: added, never edited); one whose rows only change through actions uses
`ReadOnlyAdminMixin`; actions call services through `run_service_on_each`. No admin saves or
deletes a row itself.

Every list-page action changes rows, so every action needs the change permission of its model
(`ActionPermissionMixin`, under all three mixins): read-only support staff see the list without
the action menu, and a hand-made POST of an action is a 403 with nothing run. An action may ask
for more (`@admin.action(permissions=[...])`), never for less.

Where the service runs, and why there: Django runs an add/change POST inside its own transaction
(ModelAdmin.changeform_view), so the service runs nested (`service.nested`, see
sluice/transactions.py) in a savepoint of that transaction, after the form's whole validation
(`full_clean`: fields, the form's clean(), the model's own checks and uniqueness) and before
Django decides between showing the form again and redirecting. A refusal then becomes a form
error (the page again, 200, with the message) and the savepoint leaves nothing behind. Earlier,
in the form's clean(), the model's uniqueness checks that follow would see the service's own new
row; later, in save_model, Django no longer shows the form, so a refusal could only be a 500.
"""

from django.contrib import messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db import transaction

from sluice.errors import DomainError
from sluice.forms import form_add_domain_error


class ActionPermissionMixin:
    """The one place an admin action's permission is checked (see the module docstring)."""

    def get_actions(self, request):
        if not self.has_change_permission(request):
            return {}
        return super().get_actions(request)  # then each action's own `allowed_permissions`

    def changelist_view(self, request, extra_context=None):
        # With no action offered Django would ignore the POST and show the list (200): say no.
        if request.method == "POST" and helpers.ACTION_CHECKBOX_NAME in request.POST:
            offered = self.get_actions(request)
            known = {name for _func, name, _description in self._get_base_actions()}
            posted = {name for name in request.POST.getlist("action") if name}
            if any(name in known and name not in offered for name in posted):
                raise PermissionDenied("This action is not permitted for your role.")
        return super().changelist_view(request, extra_context)


class ServiceAdminMixin(ActionPermissionMixin):
    def service_save(self, *, request, obj, data: dict):
        """Create (`obj` is None) or change `obj` from the form's `data` with the nested form
        of a service; return the row."""
        raise NotImplementedError  # each ModelAdmin says which service creates/changes its rows

    def get_form(self, request, obj=None, change=False, **kwargs):
        base = super().get_form(request, obj, change=change, **kwargs)
        model_admin = self

        class ServiceForm(base):
            def full_clean(self):
                super().full_clean()
                if not self.is_valid():
                    return
                try:
                    with transaction.atomic():  # a savepoint: a refusal leaves nothing behind
                        self.service_result = model_admin.service_save(
                            request=request, obj=obj, data=self.cleaned_data)
                except DomainError as exc:
                    form_add_domain_error(form=self, error=exc)

        return ServiceForm

    def save_model(self, request, obj, form, change):
        obj.pk = form.service_result.pk
        obj.refresh_from_db()

    def save_related(self, request, form, formsets, change):
        pass  # services own every write, inlines are read-only

    def has_delete_permission(self, request, obj=None):
        return False  # no service deletes these rows


class _RowsNotEditedMixin(ActionPermissionMixin):
    def has_change_permission(self, request, obj=None):
        # Actions still run: Django asks for the change permission without a row to offer them.
        return obj is None and super().has_change_permission(request)

    def has_delete_permission(self, request, obj=None):
        return False


class AddOnlyAdminMixin(_RowsNotEditedMixin, ServiceAdminMixin):
    """Rows are added through a service and never edited (a price version, a rollout wave)."""


class ReadOnlyAdminMixin(_RowsNotEditedMixin):
    """Rows are shown, never added, edited or deleted here."""

    def has_add_permission(self, request, obj=None):
        return False


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
