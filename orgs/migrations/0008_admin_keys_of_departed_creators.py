"""Admin keys carry their creator's rights: those whose creator is no longer a member of the
key's organization are revoked (audited). Keys without a creator keep working, as an admin's."""

from django.db import migrations
from django.db.models import Exists, OuterRef
from django.utils import timezone


def departed_revoke(apps, schema_editor):
    AdminKey = apps.get_model("orgs", "AdminKey")
    AuditEvent = apps.get_model("orgs", "AuditEvent")
    Membership = apps.get_model("orgs", "Membership")
    member = Membership.objects.filter(org_id=OuterRef("org_id"), user_id=OuterRef("created_by_id"))
    now = timezone.now()
    for key in (AdminKey.objects.filter(revoked_at__isnull=True, created_by__isnull=False)
                .exclude(Exists(member)).order_by("pk")):
        key.revoked_at = now
        key.save(update_fields=["revoked_at"])
        AuditEvent.objects.create(
            actor_label="system", org_id=key.org_id, action="admin_key.revoke",
            target_type="orgs.adminkey", target_id=str(key.pk),
            after={"revoked_at": now.isoformat()},
            reason="its creator is no longer a member of the organization")


class Migration(migrations.Migration):
    dependencies = [("orgs", "0007_invitation_tokens_out_of_the_outbox")]

    operations = [migrations.RunPython(departed_revoke, migrations.RunPython.noop)]
