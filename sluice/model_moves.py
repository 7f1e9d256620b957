"""Moving a model from one app to another without losing what hangs on its app label.

The table stays (the model keeps `db_table`, and the migrations move it in Django's state only:
`SeparateDatabaseAndState`). What names the app is moved here, in the migration that takes the
model in: its content type, and with it the permissions on it (held by groups and users) and
the admin's log entries. Audit rows keep the label they were written with (the audit log is
append-only): readers find them through the model's `FORMER_LABELS` (orgs/selectors.py).

Both directions are written, so the move migrates backwards too.
"""

from functools import partial


def content_types_move(apps, schema_editor, *, models: tuple[str, ...], old_app: str,
                       new_app: str) -> None:
    """`models` (lower-case model names) from `old_app`'s content types to `new_app`'s."""
    content_type = apps.get_model("contenttypes", "ContentType")
    for model in models:
        old = content_type.objects.filter(app_label=old_app, model=model).first()
        if old is None:
            continue  # a database made after the move, or never given permissions
        new = content_type.objects.filter(app_label=new_app, model=model).first()
        if new is None:
            old.app_label = new_app
            old.save(update_fields=["app_label"])
        else:
            _content_type_merge(apps, old=old, new=new)
    content_type.objects.clear_cache()


def _content_type_merge(apps, *, old, new) -> None:
    """Both exist (a migrate created the new one's permissions before this ran): whoever held
    an old permission gets its twin, the admin's log follows, then the old type goes."""
    permission = apps.get_model("auth", "Permission")
    for perm in permission.objects.filter(content_type=old):
        twin = permission.objects.filter(content_type=new, codename=perm.codename).first()
        if twin is None:
            perm.content_type = new
            perm.save(update_fields=["content_type"])
            continue
        for group in perm.group_set.all():
            group.permissions.add(twin)
        for user in perm.user_set.all():
            user.user_permissions.add(twin)
        perm.delete()
    try:
        log_entry = apps.get_model("admin", "LogEntry")
    except LookupError:  # the admin's tables are not made yet
        pass
    else:
        log_entry.objects.filter(content_type=old).update(content_type=new)
    old.delete()


def content_types_move_operation(*, models: tuple[str, ...], old_app: str, new_app: str):
    """The RunPython operation of a move, backwards included."""
    from django.db import migrations

    return migrations.RunPython(
        partial(content_types_move, models=models, old_app=old_app, new_app=new_app),
        partial(content_types_move, models=models, old_app=new_app, new_app=old_app))
