from importlib import import_module

from django.db import migrations

# The groups again, now that the usage models' permissions are metering's
# (metering/migrations/0001_initial.py moved them with their content types).
groups_create = import_module("console.migrations.0001_support_and_operator_groups").groups_create


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0003_operators_change_invoices"),
        ("metering", "0001_initial"),
        ("quotas", "0009_usage_models_to_metering"),
    ]

    operations = [migrations.RunPython(groups_create, migrations.RunPython.noop)]
