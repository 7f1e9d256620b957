from importlib import import_module

from django.db import migrations

# The groups again: support reads bookings and their charges, operators also cancel them.
groups_create = import_module("console.migrations.0001_support_and_operator_groups").groups_create


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0005_rollout_permissions_in_rollout"),
        ("quotas", "0011_bookings"),
        ("billing", "0005_bookings"),
    ]

    operations = [migrations.RunPython(groups_create, migrations.RunPython.noop)]
