from importlib import import_module

from django.db import migrations

# The groups again, now that the applications', waves', pool admissions', pool preferences' and
# quota requests' permissions are rollout's (rollout/migrations/0001_initial.py moved them with
# their content types).
groups_create = import_module("console.migrations.0001_support_and_operator_groups").groups_create


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0004_usage_permissions_in_metering"),
        ("rollout", "0001_initial"),
        ("orgs", "0006_applications_to_rollout"),
        ("quotas", "0010_rollout_models_to_rollout"),
    ]

    operations = [migrations.RunPython(groups_create, migrations.RunPython.noop)]
