from django.db import migrations

# Price history is never rewritten: an invoice re-rated years later must give the same cents.
# A price change is a new version; the database refuses UPDATE and DELETE of old ones.
FORWARD = """
CREATE FUNCTION billing_priceversion_refuse_change() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'billing_priceversion is append-only (% refused)', TG_OP;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER billing_priceversion_append_only
    BEFORE UPDATE OR DELETE ON billing_priceversion
    FOR EACH ROW EXECUTE FUNCTION billing_priceversion_refuse_change();
"""

BACKWARD = """
DROP TRIGGER IF EXISTS billing_priceversion_append_only ON billing_priceversion;
DROP FUNCTION IF EXISTS billing_priceversion_refuse_change();
"""


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
