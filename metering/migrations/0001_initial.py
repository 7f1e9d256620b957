"""The usage models, moved here from quotas with their tables (quotas_usageevent and its monthly
partitions, quotas_usageeventkey, quotas_usagehourly, quotas_refusalminute): Django's state
only, no table is touched. Their content types, and so the permissions on them, move to this
app (sluice/model_moves.py)."""

import django.contrib.postgres.indexes
import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models

from sluice.model_moves import content_types_move_operation

MOVED = ("usageevent", "usageeventkey", "usagehourly", "refusalminute")


def _unconstrained_fk(to: str, null: bool = False) -> models.ForeignKey:
    return models.ForeignKey(blank=null, null=null, db_index=False, db_constraint=False,
                             related_name="+", on_delete=models.deletion.DO_NOTHING, to=to)


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("orgs", "0005_api_key_slices_and_default_tier"),
        ("quotas", "0008_quota_auto_approval_rules"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.CreateModel(
                name="UsageEventKey",
                fields=[
                    ("request_id", models.CharField(max_length=128, primary_key=True,
                                                    serialize=False)),
                ],
                options={"db_table": "quotas_usageeventkey"},
            ),
            migrations.CreateModel(
                name="RefusalMinute",
                fields=[
                    ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                               serialize=False, verbose_name="ID")),
                    ("minute", models.DateTimeField()),
                    ("code", models.CharField(max_length=40)),
                    ("count", models.PositiveIntegerField()),
                    ("api_key", models.ForeignKey(
                        blank=True, null=True, on_delete=django.db.models.deletion.CASCADE,
                        related_name="+", to="orgs.apikey")),
                    ("org", models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+",
                        to="orgs.organization")),
                    ("pool", models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+",
                        to="quotas.capacitypool")),
                ],
                options={
                    "db_table": "quotas_refusalminute",
                    "indexes": [models.Index(fields=["org", "minute"],
                                             name="refusal_org_minute")],
                    "constraints": [models.UniqueConstraint(
                        fields=("org", "pool", "api_key", "minute", "code"),
                        name="refusal_minute_unique", nulls_distinct=False)],
                },
            ),
            migrations.CreateModel(
                name="UsageEvent",
                fields=[
                    ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                               serialize=False, verbose_name="ID")),
                    ("request_id", models.CharField(max_length=128)),
                    ("status", models.CharField(choices=[
                        ("completed", "Completed"), ("failed", "Failed"),
                        ("cancelled", "Cancelled")], max_length=16)),
                    ("input_tokens", models.PositiveBigIntegerField()),
                    ("cached_input_tokens", models.PositiveBigIntegerField(default=0)),
                    ("output_tokens", models.PositiveBigIntegerField()),
                    ("started_at", models.DateTimeField()),
                    ("first_token_at", models.DateTimeField(blank=True, null=True)),
                    ("finished_at", models.DateTimeField()),
                    ("ttft_ms", models.PositiveIntegerField(blank=True, null=True)),
                    ("output_tps", models.FloatField(blank=True, null=True)),
                    ("premium_eligible", models.BooleanField(default=True)),
                    ("unreserved", models.BooleanField(default=False)),
                    ("received_at", models.DateTimeField(default=django.utils.timezone.now)),
                    ("api_key", _unconstrained_fk("orgs.apikey", null=True)),
                    ("org", _unconstrained_fk("orgs.organization")),
                    ("pool", _unconstrained_fk("quotas.capacitypool")),
                ],
                options={
                    "db_table": "quotas_usageevent",
                    "indexes": [
                        models.Index(fields=["org", "started_at"], name="usage_org_started"),
                        django.contrib.postgres.indexes.BrinIndex(
                            fields=["finished_at"], name="usage_finished_brin"),
                    ],
                },
            ),
            migrations.CreateModel(
                name="UsageHourly",
                fields=[
                    ("id", models.BigAutoField(auto_created=True, primary_key=True,
                                               serialize=False, verbose_name="ID")),
                    ("hour", models.DateTimeField()),
                    ("hours", models.PositiveSmallIntegerField(db_default=1)),
                    ("requests", models.PositiveBigIntegerField(default=0)),
                    ("errors", models.PositiveBigIntegerField(default=0)),
                    ("input_tokens", models.PositiveBigIntegerField(default=0)),
                    ("cached_input_tokens", models.PositiveBigIntegerField(default=0)),
                    ("output_tokens", models.PositiveBigIntegerField(default=0)),
                    ("premium_input_tokens", models.PositiveBigIntegerField(default=0)),
                    ("premium_output_tokens", models.PositiveBigIntegerField(default=0)),
                    ("ttft_ms_total", models.PositiveBigIntegerField(default=0)),
                    ("ttft_count", models.PositiveBigIntegerField(default=0)),
                    ("decode_ms_total", models.PositiveBigIntegerField(default=0)),
                    ("api_key", models.ForeignKey(
                        blank=True, null=True, on_delete=django.db.models.deletion.PROTECT,
                        related_name="+", to="orgs.apikey")),
                    ("org", models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT, related_name="+",
                        to="orgs.organization")),
                    ("pool", models.ForeignKey(
                        on_delete=django.db.models.deletion.PROTECT, related_name="+",
                        to="quotas.capacitypool")),
                ],
                options={
                    "db_table": "quotas_usagehourly",
                    "indexes": [
                        models.Index(fields=["org", "hour"], name="usage_hourly_org_hour"),
                        models.Index(condition=models.Q(("hours", 1)), fields=["hour"],
                                     name="usage_hourly_uncompacted"),
                    ],
                    "constraints": [
                        models.UniqueConstraint(fields=("org", "pool", "api_key", "hour"),
                                                name="usage_hourly_unique",
                                                nulls_distinct=False),
                        models.CheckConstraint(
                            condition=models.Q(
                                ("premium_input_tokens__lte", models.F("input_tokens")),
                                ("premium_output_tokens__lte", models.F("output_tokens"))),
                            name="usage_hourly_premium_le_total"),
                        models.CheckConstraint(
                            condition=models.Q(("hours", 1), models.Q(
                                ("hour__hour", 0), ("hours", 24)), _connector="OR"),
                            name="usage_hourly_hours_valid"),
                    ],
                },
            ),
        ]),
        content_types_move_operation(models=MOVED, old_app="quotas", new_app="metering"),
    ]
