from importlib import import_module

from django.db import migrations

# Operators void, re-issue and close invoices: admin actions now need the change permission of
# what they change (sluice/admin.py), so the operator group gets billing.change_invoice.
groups_create = import_module("console.migrations.0001_support_and_operator_groups").groups_create


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0002_rollout_and_billing_permissions"),
        ("billing", "0003_cached_input_price"),
    ]

    operations = [migrations.RunPython(groups_create, migrations.RunPython.noop)]
