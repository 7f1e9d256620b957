from django.db import migrations

# The audit log is append-only at the database level, not just by convention: no code path,
# admin screen or stray shell session can rewrite history.
FORWARD = """
CREATE FUNCTION orgs_auditevent_refuse_change() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'orgs_auditevent is append-only (% refused)', TG_OP;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER orgs_auditevent_append_only
    BEFORE UPDATE OR DELETE ON orgs_auditevent
    FOR EACH ROW EXECUTE FUNCTION orgs_auditevent_refuse_change();
"""

BACKWARD = """
DROP TRIGGER IF EXISTS orgs_auditevent_append_only ON orgs_auditevent;
DROP FUNCTION IF EXISTS orgs_auditevent_refuse_change();
"""


class Migration(migrations.Migration):
    dependencies = [("orgs", "0001_initial")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
