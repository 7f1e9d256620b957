"""Usage events partitioned by month of `started_at` (PostgreSQL declarative partitioning), and
hourly rollups that may be compacted to whole days.

Django does not manage partitioned tables, so the database side is SQL and the state side tells
Django what the model looks like (quotas/models.py says why each piece is the way it is):

- quotas_usageevent becomes a table PARTITION BY RANGE (started_at), one partition a month
  (quotas_usageevent_yYYYYmMM), with the existing rows moved in: the old table is renamed, the
  new one created LIKE it (so any column added before this migration comes along), the rows
  copied, the old table dropped. Its indexes are the ones reads need: the primary key
  (id, started_at) - PostgreSQL wants the partition key in it -, (org_id, started_at) and BRIN
  on finished_at; the single-column foreign-key indexes and the request_id unique index go,
  and so do its foreign-key constraints (quotas/models.py says why).
- quotas_usageeventkey holds one row per request_id: a unique index on a partitioned table can
  only be unique per partition, so request ids are claimed here, in the same statement that
  inserts the events (quotas/usage.py). Filled from the existing events.
- Partitions: every month from the oldest event to the month after this one, so the data and
  this month's and next month's traffic have one; later months are created by every migrate
  and by beat (quotas/partitions.py).
- quotas_usagehourly.hours: 1, or 24 for a row that sums a whole UTC day (quotas/retention.py).
"""

from django.db import migrations, models

FORWARD = """
CREATE OR REPLACE FUNCTION pg_temp.usage_partition_create(month date) RETURNS void AS $$
BEGIN
    EXECUTE format(
        'CREATE TABLE IF NOT EXISTS %I PARTITION OF quotas_usageevent '
        'FOR VALUES FROM (%L) TO (%L)',
        'quotas_usageevent_y' || to_char(month, 'YYYY') || 'm' || to_char(month, 'MM'),
        month::timestamp AT TIME ZONE 'UTC',
        (month + interval '1 month')::timestamp AT TIME ZONE 'UTC');
END
$$ LANGUAGE plpgsql;

ALTER TABLE quotas_usageevent RENAME TO quotas_usageevent_unpartitioned;
ALTER SEQUENCE quotas_usageevent_id_seq RENAME TO quotas_usageevent_unpartitioned_id_seq;
CREATE TABLE quotas_usageevent (
    LIKE quotas_usageevent_unpartitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS
    INCLUDING IDENTITY
) PARTITION BY RANGE (started_at);

SELECT pg_temp.usage_partition_create(month::date)
FROM generate_series(
    date_trunc('month', least(
        (SELECT min(started_at) FROM quotas_usageevent_unpartitioned), now()) AT TIME ZONE 'UTC'),
    date_trunc('month', now() AT TIME ZONE 'UTC') + interval '1 month',
    interval '1 month') AS month;

INSERT INTO quotas_usageevent SELECT * FROM quotas_usageevent_unpartitioned;
SELECT setval(pg_get_serial_sequence('quotas_usageevent', 'id'),
              coalesce((SELECT max(id) FROM quotas_usageevent), 0) + 1, false);

CREATE TABLE quotas_usageeventkey (request_id varchar(128) PRIMARY KEY);
INSERT INTO quotas_usageeventkey SELECT request_id FROM quotas_usageevent_unpartitioned;

DROP TABLE quotas_usageevent_unpartitioned;

ALTER TABLE quotas_usageevent ADD CONSTRAINT quotas_usageevent_pkey PRIMARY KEY (id, started_at);
CREATE INDEX usage_org_started ON quotas_usageevent (org_id, started_at);
CREATE INDEX usage_finished_brin ON quotas_usageevent USING brin (finished_at);
"""

# Back to one plain table: every partition's rows (detached ones are left alone).
REVERSE = """
ALTER TABLE quotas_usageevent RENAME TO quotas_usageevent_partitioned;
ALTER SEQUENCE quotas_usageevent_id_seq RENAME TO quotas_usageevent_partitioned_id_seq;
CREATE TABLE quotas_usageevent (
    LIKE quotas_usageevent_partitioned INCLUDING DEFAULTS INCLUDING CONSTRAINTS
    INCLUDING IDENTITY
);
INSERT INTO quotas_usageevent SELECT * FROM quotas_usageevent_partitioned;
SELECT setval(pg_get_serial_sequence('quotas_usageevent', 'id'),
              coalesce((SELECT max(id) FROM quotas_usageevent), 0) + 1, false);
DROP TABLE quotas_usageevent_partitioned;
DROP TABLE quotas_usageeventkey;
ALTER TABLE quotas_usageevent ADD PRIMARY KEY (id),
    ADD CONSTRAINT quotas_usageevent_request_id_key UNIQUE (request_id);
CREATE INDEX usage_org_started ON quotas_usageevent (org_id, started_at);
CREATE INDEX usage_finished_brin ON quotas_usageevent USING brin (finished_at);
CREATE INDEX ON quotas_usageevent (org_id);
CREATE INDEX ON quotas_usageevent (pool_id);
CREATE INDEX ON quotas_usageevent (api_key_id);
ALTER TABLE quotas_usageevent
    ADD FOREIGN KEY (org_id) REFERENCES orgs_organization (id) DEFERRABLE INITIALLY DEFERRED,
    ADD FOREIGN KEY (pool_id) REFERENCES quotas_capacitypool (id) DEFERRABLE INITIALLY DEFERRED,
    ADD FOREIGN KEY (api_key_id) REFERENCES orgs_apikey (id) DEFERRABLE INITIALLY DEFERRED;
"""


def _unconstrained_fk(to: str, null: bool = False) -> models.ForeignKey:
    return models.ForeignKey(blank=null, null=null, db_index=False, db_constraint=False,
                             related_name="+", on_delete=models.deletion.DO_NOTHING, to=to)


class Migration(migrations.Migration):

    dependencies = [
        ("orgs", "0004_adminkey"),
        ("quotas", "0005_refusalminute"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunSQL(FORWARD, REVERSE)],
            state_operations=[
                migrations.AlterField(model_name="usageevent", name="request_id",
                                      field=models.CharField(max_length=128)),
                migrations.AlterField(model_name="usageevent", name="org",
                                      field=_unconstrained_fk("orgs.organization")),
                migrations.AlterField(model_name="usageevent", name="pool",
                                      field=_unconstrained_fk("quotas.capacitypool")),
                migrations.AlterField(model_name="usageevent", name="api_key",
                                      field=_unconstrained_fk("orgs.apikey", null=True)),
                migrations.CreateModel(
                    name="UsageEventKey",
                    fields=[
                        ("request_id", models.CharField(max_length=128, primary_key=True,
                                                        serialize=False)),
                    ],
                ),
            ],
        ),
        migrations.AddField(
            model_name="usagehourly", name="hours",
            field=models.PositiveSmallIntegerField(db_default=1),
        ),
        migrations.AddConstraint(
            model_name="usagehourly",
            constraint=models.CheckConstraint(
                condition=models.Q(hours=1) | models.Q(hours=24, hour__hour=0),
                name="usage_hourly_hours_valid"),
        ),
        migrations.AddIndex(
            model_name="usagehourly",
            index=models.Index(condition=models.Q(hours=1), fields=["hour"],
                               name="usage_hourly_uncompacted"),
        ),
    ]
