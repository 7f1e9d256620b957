"""The rollout's models, moved here with their tables: waves, pool admission settings, pool
preferences and quota requests from quotas (quotas_* tables), the waitlist applications, their
checklists and notes from orgs (orgs_* tables). Django's state only, no table is touched.
Their content types, and so the permissions on them, move to this app
(sluice/model_moves.py); emails queued under the kinds the old apps gave them keep their place
in the outbox under this app's kinds."""

import django.core.validators
import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models

from sluice.model_moves import content_types_move_operation

FROM_QUOTAS = ("rolloutwave", "pooladmission", "orgpoolpreference", "quotarequest")
FROM_ORGS = ("application", "applicationcheck", "applicationnote")
# Outbox email kinds: as the old apps named them -> as rollout names them.
EMAIL_KINDS = {"orgs.received": "rollout.received", "orgs.info_requested": "rollout.info_requested",
               "orgs.rejected": "rollout.rejected", "quotas.approved": "rollout.approved",
               "quotas.admitted": "rollout.admitted"}


def _email_kinds_rename(renames: dict[str, str]):
    def run(apps, schema_editor):
        email = apps.get_model("sluice", "OutboundEmail")
        for old, new in renames.items():
            email.objects.filter(kind=old).update(kind=new)
    return run


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ("contenttypes", "0002_remove_content_type_name"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("sluice", "0001_email_outbox"),
        ("orgs", "0005_api_key_slices_and_default_tier"),
        ("quotas", "0009_usage_models_to_metering"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=[
            migrations.CreateModel(
                name='PoolAdmission',
                fields=[
                    ('pool', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='admission', serialize=False, to='quotas.capacitypool')),
                    ('auto_admit', models.BooleanField(default=False)),
                    ('quota_auto_approve_max_tps', models.PositiveIntegerField(default=0)),
                    ('quota_auto_approve_max_burst_tps', models.PositiveIntegerField(default=0)),
                    ('quota_auto_approve_max_daily_tokens', models.PositiveBigIntegerField(default=0)),
                    ('quota_auto_approve_max_concurrency', models.PositiveIntegerField(default=0)),
                    ('quota_auto_approve_window_days', models.PositiveSmallIntegerField(default=30, validators=[django.core.validators.MinValueValidator(1), django.core.validators.MaxValueValidator(366)])),
                    ('updated_at', models.DateTimeField(auto_now=True)),
                ],
                options={
                    'db_table': 'quotas_pooladmission',
                },
            ),
            migrations.CreateModel(
                name='Application',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('state', models.CharField(choices=[('submitted', 'Submitted'), ('in_review', 'In review'), ('info_requested', 'More information requested'), ('approved', 'Approved (waitlisted)'), ('admitted', 'Admitted'), ('rejected', 'Rejected')], default='submitted', max_length=16)),
                    ('legal_name', models.CharField(max_length=200)),
                    ('website', models.URLField(max_length=300)),
                    ('country', models.CharField(help_text='ISO 3166-1 alpha-2 code', max_length=2)),
                    ('contact_name', models.CharField(max_length=200)),
                    ('contact_email', models.EmailField(max_length=254)),
                    ('use_case', models.CharField(choices=[('voice', 'Voice'), ('agents', 'Agents'), ('coding', 'Coding'), ('chat', 'Chat'), ('batch', 'Batch'), ('other', 'Other')], max_length=16)),
                    ('use_case_description', models.TextField()),
                    ('expected_peak_tps', models.PositiveIntegerField()),
                    ('expected_daily_tokens', models.PositiveBigIntegerField()),
                    ('latency_sensitivity', models.CharField(choices=[('realtime', 'Real-time: a person waits on every token (voice, live agents)'), ('interactive', 'Interactive: a person waits on the answer'), ('tolerant', 'Tolerant: seconds do not matter much'), ('none', 'None: offline or batch work')], max_length=16)),
                    ('preferred_region', models.CharField(max_length=50)),
                    ('submitted_at', models.DateTimeField(default=django.utils.timezone.now)),
                    ('decision', models.CharField(blank=True, choices=[('approve', 'Approve'), ('reject', 'Reject'), ('request_info', 'Request more information')], default='', max_length=16)),
                    ('decision_reason', models.TextField(blank=True, default='')),
                    ('shared_reason', models.TextField(blank=True, default='')),
                    ('decided_at', models.DateTimeField(blank=True, null=True)),
                    ('score_override', models.IntegerField(blank=True, null=True)),
                    ('score_override_reason', models.TextField(blank=True, default='')),
                    ('updated_at', models.DateTimeField(auto_now=True)),
                    ('decided_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                    ('org', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='applications', to='orgs.organization')),
                    ('reviewer', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                    ('score_override_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                    ('submitted_by', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ],
                options={
                    'db_table': 'orgs_application',
                    'ordering': ['-submitted_at', '-id'],
                },
            ),
            migrations.CreateModel(
                name='ApplicationCheck',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('item', models.CharField(choices=[('identity_verified', 'Identity verified'), ('use_case_acceptable', 'Use case acceptable'), ('contact_reachable', 'Contact reachable'), ('payment_method_on_file', 'Payment method on file')], max_length=32)),
                    ('done', models.BooleanField(default=False)),
                    ('done_by_label', models.CharField(blank=True, default='', max_length=100)),
                    ('done_at', models.DateTimeField(blank=True, null=True)),
                    ('note', models.TextField(blank=True, default='')),
                    ('application', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='checks', to='rollout.application')),
                ],
                options={
                    'db_table': 'orgs_applicationcheck',
                    'ordering': ['application_id', 'id'],
                },
            ),
            migrations.CreateModel(
                name='ApplicationNote',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('body', models.TextField()),
                    ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                    ('application', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='notes', to='rollout.application')),
                    ('author', models.ForeignKey(null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ],
                options={
                    'db_table': 'orgs_applicationnote',
                    'ordering': ['created_at', 'id'],
                },
            ),
            migrations.CreateModel(
                name='OrgPoolPreference',
                fields=[
                    ('org', models.OneToOneField(on_delete=django.db.models.deletion.CASCADE, primary_key=True, related_name='pool_preference', serialize=False, to='orgs.organization')),
                    ('updated_at', models.DateTimeField(auto_now=True)),
                    ('pool', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='quotas.capacitypool')),
                ],
                options={
                    'db_table': 'quotas_orgpoolpreference',
                },
            ),
            migrations.CreateModel(
                name='QuotaRequest',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('guaranteed_tps', models.PositiveIntegerField()),
                    ('burst_tps', models.PositiveIntegerField()),
                    ('daily_tokens', models.PositiveBigIntegerField()),
                    ('max_concurrency', models.PositiveIntegerField()),
                    ('reason', models.TextField()),
                    ('status', models.CharField(choices=[('pending', 'Pending'), ('approved', 'Approved'), ('denied', 'Denied'), ('cancelled', 'Cancelled')], default='pending', max_length=16)),
                    ('decided_by', models.CharField(blank=True, default='', max_length=150)),
                    ('decision_reason', models.TextField(blank=True, default='')),
                    ('decided_at', models.DateTimeField(blank=True, null=True)),
                    ('previous_limits', models.JSONField(blank=True, null=True)),
                    ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                    ('org', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='orgs.organization')),
                    ('pool', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to='quotas.capacitypool')),
                    ('requested_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                ],
                options={
                    'db_table': 'quotas_quotarequest',
                    'ordering': ['-created_at', '-id'],
                },
            ),
            migrations.CreateModel(
                name='RolloutWave',
                fields=[
                    ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                    ('name', models.CharField(max_length=200)),
                    ('opens_at', models.DateTimeField()),
                    ('closes_at', models.DateTimeField(blank=True, null=True)),
                    ('capacity_tps', models.PositiveIntegerField(help_text='Tokens/s added to the pool on opening')),
                    ('max_orgs', models.PositiveIntegerField()),
                    ('guaranteed_tps', models.PositiveIntegerField()),
                    ('burst_tps', models.PositiveIntegerField()),
                    ('daily_tokens', models.PositiveBigIntegerField()),
                    ('max_concurrency', models.PositiveIntegerField()),
                    ('state', models.CharField(choices=[('scheduled', 'Scheduled'), ('open', 'Open'), ('closed', 'Closed')], default='scheduled', max_length=16)),
                    ('opened_at', models.DateTimeField(blank=True, null=True)),
                    ('closed_at', models.DateTimeField(blank=True, null=True)),
                    ('admitted_count', models.PositiveIntegerField(default=0)),
                    ('created_at', models.DateTimeField(auto_now_add=True)),
                    ('created_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                    ('pool', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='waves', to='quotas.capacitypool')),
                ],
                options={
                    'db_table': 'quotas_rolloutwave',
                    'ordering': ['opens_at', 'id'],
                },
            ),
            migrations.AddIndex(
                model_name='application',
                index=models.Index(fields=['state', 'submitted_at'], name='application_state_sub'),
            ),
            migrations.AddConstraint(
                model_name='application',
                constraint=models.UniqueConstraint(condition=models.Q(('state__in', ('submitted', 'in_review', 'info_requested', 'approved'))), fields=('org',), name='application_one_open_per_org'),
            ),
            migrations.AddConstraint(
                model_name='application',
                constraint=models.CheckConstraint(condition=models.Q(('state__in', ['submitted', 'in_review', 'info_requested', 'approved', 'admitted', 'rejected'])), name='application_state_valid'),
            ),
            migrations.AddConstraint(
                model_name='application',
                constraint=models.CheckConstraint(condition=models.Q(('expected_peak_tps__gt', 0)), name='application_peak_tps_positive'),
            ),
            migrations.AddConstraint(
                model_name='application',
                constraint=models.CheckConstraint(condition=models.Q(('expected_daily_tokens__gt', 0)), name='application_daily_tokens_positive'),
            ),
            migrations.AddConstraint(
                model_name='application',
                constraint=models.CheckConstraint(condition=models.Q(('score_override__isnull', True), models.Q(('score_override_reason', ''), _negated=True), _connector='OR'), name='application_override_has_reason'),
            ),
            migrations.AddConstraint(
                model_name='applicationcheck',
                constraint=models.UniqueConstraint(fields=('application', 'item'), name='application_check_unique_item'),
            ),
            migrations.AddIndex(
                model_name='quotarequest',
                index=models.Index(fields=['status', 'created_at'], name='quota_request_inbox'),
            ),
            migrations.AddConstraint(
                model_name='quotarequest',
                constraint=models.UniqueConstraint(condition=models.Q(('status', 'pending')), fields=('org', 'pool'), name='quota_request_one_pending_per_org_pool'),
            ),
            migrations.AddConstraint(
                model_name='quotarequest',
                constraint=models.CheckConstraint(condition=models.Q(('burst_tps__gte', models.F('guaranteed_tps'))), name='quota_request_burst_ge_guaranteed'),
            ),
            migrations.AddIndex(
                model_name='rolloutwave',
                index=models.Index(fields=['state', 'opens_at'], name='wave_state_opens'),
            ),
            migrations.AddConstraint(
                model_name='rolloutwave',
                constraint=models.CheckConstraint(condition=models.Q(('state__in', ['scheduled', 'open', 'closed'])), name='wave_state_valid'),
            ),
            migrations.AddConstraint(
                model_name='rolloutwave',
                constraint=models.CheckConstraint(condition=models.Q(('max_orgs__gt', 0)), name='wave_max_orgs_positive'),
            ),
            migrations.AddConstraint(
                model_name='rolloutwave',
                constraint=models.CheckConstraint(condition=models.Q(('guaranteed_tps__gt', 0)), name='wave_guaranteed_positive'),
            ),
            migrations.AddConstraint(
                model_name='rolloutwave',
                constraint=models.CheckConstraint(condition=models.Q(('burst_tps__gte', models.F('guaranteed_tps'))), name='wave_burst_ge_guaranteed'),
            ),
            migrations.AddConstraint(
                model_name='rolloutwave',
                constraint=models.CheckConstraint(condition=models.Q(('max_concurrency__gt', 0)), name='wave_concurrency_positive'),
            ),
            migrations.AddConstraint(
                model_name='rolloutwave',
                constraint=models.CheckConstraint(condition=models.Q(('closes_at__isnull', True), ('closes_at__gt', models.F('opens_at')), _connector='OR'), name='wave_closes_after_opens'),
            ),
        ]),
        content_types_move_operation(models=FROM_QUOTAS, old_app="quotas", new_app="rollout"),
        content_types_move_operation(models=FROM_ORGS, old_app="orgs", new_app="rollout"),
        migrations.RunPython(_email_kinds_rename(EMAIL_KINDS), _email_kinds_rename(
            {new: old for old, new in EMAIL_KINDS.items()})),
    ]
