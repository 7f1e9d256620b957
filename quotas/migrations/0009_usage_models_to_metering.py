"""The usage models now belong to metering (metering/migrations/0001_initial.py takes them in
with their tables): they leave this app's state only."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("quotas", "0008_quota_auto_approval_rules"),
        ("metering", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.DeleteModel(name="UsageEventKey"),
            migrations.DeleteModel(name="RefusalMinute"),
            migrations.DeleteModel(name="UsageEvent"),
            migrations.DeleteModel(name="UsageHourly"),
        ]),
    ]
