"""The waves, pool admission settings, pool preferences and quota requests now belong to rollout
(rollout/migrations/0001_initial.py takes them in with their tables): they leave this app's
state only."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("quotas", "0009_usage_models_to_metering"),
        ("rollout", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.DeleteModel(name="PoolAdmission"),
            migrations.DeleteModel(name="OrgPoolPreference"),
            migrations.DeleteModel(name="QuotaRequest"),
            migrations.DeleteModel(name="RolloutWave"),
        ]),
    ]
