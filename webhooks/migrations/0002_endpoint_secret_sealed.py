"""Signing secrets sealed at rest (sluice/sealing.py): each endpoint's clear `secret` is sealed
into `secret_sealed`, its first 10 characters kept as `secret_hint`, and the clear column is
dropped. Backwards, the secrets are opened into the clear column again."""

from django.db import migrations, models

from sluice.sealing import seal, unseal

PURPOSE = "webhook signing secret"  # webhooks.models.SECRET_PURPOSE when this was written


def secrets_seal(apps, schema_editor):
    endpoints = apps.get_model("webhooks", "WebhookEndpoint")
    for endpoint in endpoints.objects.only("pk", "secret").iterator():
        endpoints.objects.filter(pk=endpoint.pk).update(
            secret_sealed=seal(endpoint.secret, purpose=PURPOSE), secret_hint=endpoint.secret[:10])


def secrets_open(apps, schema_editor):
    endpoints = apps.get_model("webhooks", "WebhookEndpoint")
    for endpoint in endpoints.objects.only("pk", "secret_sealed").iterator():
        endpoints.objects.filter(pk=endpoint.pk).update(
            secret=unseal(endpoint.secret_sealed, purpose=PURPOSE))


class Migration(migrations.Migration):

    dependencies = [
        ("webhooks", "0001_initial"),
    ]

    operations = [
        migrations.AddField(
            model_name="webhookendpoint", name="secret_sealed",
            field=models.TextField(default=""), preserve_default=False,
        ),
        migrations.AddField(
            model_name="webhookendpoint", name="secret_hint",
            field=models.CharField(max_length=12, default=""), preserve_default=False,
        ),
        migrations.AlterField(
            model_name="webhookendpoint", name="secret",
            field=models.CharField(max_length=100, default=""),
        ),
        migrations.RunPython(secrets_seal, secrets_open, elidable=False),
        migrations.RemoveField(model_name="webhookendpoint", name="secret"),
    ]
