from django.contrib.auth.management import create_permissions
from django.db import migrations

from console.permissions import groups_sync


def groups_create(apps, schema_editor):
    # Permissions are normally created after all migrations (post_migrate); a fresh database
    # needs them now, so create them for every app first.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, verbosity=0)
        app_config.models_module = None
    present = {(m._meta.app_label, m._meta.model_name) for m in apps.get_models()}
    groups_sync(group_model=apps.get_model("auth", "Group"),
                permission_model=apps.get_model("auth", "Permission"), models_present=present)


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("orgs", "0002_auditevent_append_only"),
        ("quotas", "0001_initial"),
    ]

    operations = [migrations.RunPython(groups_create, migrations.RunPython.noop)]
