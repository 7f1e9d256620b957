"""An endpoint leased by the worker delivering to it, or resting after a slow attempt."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('webhooks', '0002_endpoint_secret_sealed'),
    ]

    operations = [
        migrations.AddField(
            model_name='webhookendpoint',
            name='busy_until',
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
