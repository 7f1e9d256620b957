"""The waitlist applications, their checklists and notes now belong to rollout
(rollout/migrations/0001_initial.py takes them in with their tables): they leave this app's
state only."""

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ("orgs", "0005_api_key_slices_and_default_tier"),
        ("rollout", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.DeleteModel(name="ApplicationNote"),
            migrations.DeleteModel(name="ApplicationCheck"),
            migrations.DeleteModel(name="Application"),
        ]),
    ]
