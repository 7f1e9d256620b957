"""Invitation emails that can no longer be sent (failed) drop the token their outbox row held:
invitation tokens are now made again from the secret key when the email is built, and a row
that will never be sent has no use for one. Pending rows keep theirs until they are sent (then it is cleared)."""

from django.db import migrations


def tokens_drop(apps, schema_editor):
    OutboundEmail = apps.get_model("sluice", "OutboundEmail")
    rows = OutboundEmail.objects.filter(kind="orgs.invitation", params__has_key="token") \
        .exclude(status="pending")
    for row in rows:
        row.params = {k: v for k, v in row.params.items() if k != "token"}
        row.save(update_fields=["params"])


class Migration(migrations.Migration):
    dependencies = [
        ("orgs", "0006_applications_to_rollout"),
        ("sluice", "0001_email_outbox"),
    ]

    operations = [migrations.RunPython(tokens_drop, migrations.RunPython.noop)]
