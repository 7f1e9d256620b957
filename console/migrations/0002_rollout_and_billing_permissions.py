from importlib import import_module

from django.db import migrations

# The same function as 0001: it creates any missing permissions, then makes each group hold
# exactly the lists in console/permissions.py (now with waitlist, waves, quota requests,
# gateway tokens and billing).
groups_create = import_module("console.migrations.0001_support_and_operator_groups").groups_create


class Migration(migrations.Migration):
    dependencies = [
        ("console", "0001_support_and_operator_groups"),
        ("orgs", "0003_waitlist_applications"),
        ("quotas", "0003_quota_requests"),
        ("billing", "0002_priceversion_append_only"),
    ]

    operations = [migrations.RunPython(groups_create, migrations.RunPython.noop)]
