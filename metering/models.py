"""What the gateways reported: usage events, their hourly rollups and refusals per minute.

These models moved here from the quotas app and keep its tables (`db_table`): the usage
events' table is partitioned by month (metering/partitions.py), its partitions are named after
it, and raw SQL in ingestion and retention names it, so a rename would touch every partition
for no gain. `FORMER_LABELS` names them as they were (orgs.selectors.audit_target_labels).
"""

from django.contrib.postgres.indexes import BrinIndex
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from orgs.models import Organization
from quotas.models import CapacityPool


class UsageStatus(models.TextChoices):
    COMPLETED = "completed", "Completed"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    # The gateway died mid-stream: billed from the last progress checkpoint (Sluice's sweep of
    # an expired lease, or a replacement gateway process). A later real event replaces it.
    INTERRUPTED = "interrupted", "Interrupted"


class UsageEvent(models.Model):
    """One inference request as the gateway reported it.

    Partitioned by month of `started_at` (PostgreSQL declarative partitioning, created by
    quotas migration 0006 and kept by metering/partitions.py): old months are dropped whole, never
    deleted row by row (metering/retention.py). A unique index on a partitioned table is only
    unique within a partition, so `request_id` is made unique by `UsageEventKey`, claimed in the
    same statement that inserts the event (metering/usage.py): a retried report is a duplicate
    whatever month its started_at names.

    The foreign keys are neither constrained nor indexed in the database. Every event is
    rolled up, in the same statement, into a `UsageHourly` row naming the same org, pool and
    key, whose constraints check them and protect them from deletion; here a constraint would
    cost three lookups per event and, worse, detaching a partition re-creates its constraints'
    triggers on the org, pool and key tables, whose locks deadlock with ingestion's checks.
    (org, started_at) serves every read by org; pools and keys are read through the rollups."""

    request_id = models.CharField(max_length=128)
    org = models.ForeignKey(Organization, on_delete=models.DO_NOTHING, related_name="+",
                            db_index=False, db_constraint=False)
    pool = models.ForeignKey(CapacityPool, on_delete=models.DO_NOTHING, related_name="+",
                             db_index=False, db_constraint=False)
    api_key = models.ForeignKey("orgs.ApiKey", on_delete=models.DO_NOTHING, null=True,
                                blank=True, related_name="+", db_index=False,
                                db_constraint=False)
    status = models.CharField(max_length=16, choices=UsageStatus.choices)
    input_tokens = models.PositiveBigIntegerField()
    # Of the input tokens, those the upstream served from its cache (own price, no prefill).
    cached_input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField()
    started_at = models.DateTimeField()
    first_token_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField()
    # Derived at ingestion: the fast tier's promise, per request.
    ttft_ms = models.PositiveIntegerField(null=True, blank=True)
    output_tps = models.FloatField(null=True, blank=True)
    premium_eligible = models.BooleanField(default=True)
    # True when no live reservation was found (expired, or admitted while failing open).
    unreserved = models.BooleanField(default=False)
    # How long it waited in the pool's admission queue before it was admitted (admission/),
    # as the gateway reported it; null: it did not wait.
    queued_ms = models.PositiveIntegerField(null=True, blank=True)
    received_at = models.DateTimeField(default=timezone.now)

    FORMER_LABELS = ("quotas.usageevent",)

    class Meta:
        db_table = "quotas_usageevent"
        indexes = [
            models.Index(fields=["org", "started_at"], name="usage_org_started"),
            # Events arrive roughly in time order, so a BRIN index on finish time stays tiny
            # and serves the console's "last hour, every pool" scans.
            BrinIndex(fields=["finished_at"], name="usage_finished_brin"),
        ]

    def __str__(self) -> str:
        return self.request_id


class UsageEventKey(models.Model):
    """The request ids of the recorded usage events, one row each: what keeps ingestion
    idempotent across partitions. A month's keys are deleted with its partition
    (metering/retention.py), found through the partition's own events. The table is created by
    SQL (quotas migration 0006): a primary key on a CharField would get Django's extra
    varchar_pattern_ops index, which no query here uses."""

    request_id = models.CharField(max_length=128, primary_key=True)
    # The started_at of its event while that is an interrupted one (else null): a real event
    # for the request replaces it, and finds it by (org, started_at), the events' index.
    interrupted_started_at = models.DateTimeField(null=True, blank=True)

    FORMER_LABELS = ("quotas.usageeventkey",)

    class Meta:
        db_table = "quotas_usageeventkey"

    def __str__(self) -> str:
        return self.request_id


class UsageHourly(models.Model):
    """Rollup per org x pool x API key and UTC hour, updated in the same transaction as the
    events. Billing rates these rows, so premium-eligible tokens are kept apart from the others.

    Rows older than SLUICE_USAGE_HOURLY_RETENTION_DAYS are compacted to one row per UTC day
    (`hours` = 24, `hour` = its midnight; metering/retention.py), in this same table: every reader
    sums whatever rows fall in its range, so days and hours add up alike without it knowing,
    and a late event for a compacted day simply adds an hourly row beside the day's. A day in
    which a price version starts after midnight stays hourly for that pool, so rating (the
    version in force at `hour`) stays exact. Readers that need hour-by-hour figures read only
    recent hours (charts of at most 7 days, today's quota, this month's spend), which the
    retention setting's minimum keeps hourly."""

    # Every additive figure of a rollup row: compaction sums exactly these.
    COUNTERS = ("requests", "errors", "input_tokens", "cached_input_tokens", "output_tokens",
                "premium_input_tokens", "premium_output_tokens", "ttft_ms_total", "ttft_count",
                "decode_ms_total", "interrupted")

    org = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="+")
    pool = models.ForeignKey(CapacityPool, on_delete=models.PROTECT, related_name="+")
    api_key = models.ForeignKey("orgs.ApiKey", on_delete=models.PROTECT, null=True,
                                blank=True, related_name="+")
    hour = models.DateTimeField()
    # 1 for an hour; 24 for a compacted UTC day starting at `hour`. A database default: the
    # ingestion's INSERT does not name it.
    hours = models.PositiveSmallIntegerField(db_default=1)
    requests = models.PositiveBigIntegerField(default=0)
    errors = models.PositiveBigIntegerField(default=0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    cached_input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    premium_input_tokens = models.PositiveBigIntegerField(default=0)
    premium_output_tokens = models.PositiveBigIntegerField(default=0)
    ttft_ms_total = models.PositiveBigIntegerField(default=0)
    ttft_count = models.PositiveBigIntegerField(default=0)
    decode_ms_total = models.PositiveBigIntegerField(default=0)
    # Of `requests` (and `errors`), those billed from a lease's last progress: the gateway died
    # mid-stream (docs/hook.md, Leases). A database default: rows written before it count 0.
    interrupted = models.PositiveBigIntegerField(default=0, db_default=0)

    FORMER_LABELS = ("quotas.usagehourly",)

    class Meta:
        db_table = "quotas_usagehourly"
        constraints = [
            models.UniqueConstraint(
                fields=["org", "pool", "api_key", "hour"], nulls_distinct=False,
                name="usage_hourly_unique",
            ),
            models.CheckConstraint(
                name="usage_hourly_premium_le_total",
                condition=Q(premium_input_tokens__lte=F("input_tokens"))
                & Q(premium_output_tokens__lte=F("output_tokens")),
            ),
            models.CheckConstraint(name="usage_hourly_hours_valid",
                                   condition=Q(hours=1) | Q(hours=24, hour__hour=0)),
        ]
        indexes = [
            models.Index(fields=["org", "hour"], name="usage_hourly_org_hour"),
            # The hours not compacted yet, oldest first: what compaction looks for each day.
            models.Index(fields=["hour"], condition=Q(hours=1), name="usage_hourly_uncompacted"),
        ]

    def __str__(self) -> str:
        span = "day" if self.hours == 24 else "hour"
        return (f"{self.org_id}/{self.pool_id}/{self.api_key_id} {span} of "
                f"{self.hour:%Y-%m-%d %H}:00")


class RefusalMinute(models.Model):
    """Refusals of one org in one pool (and API key) by code, per UTC minute: drained from the
    hook's Redis counters by metering/refusals.py (the count is the minute's full total)."""

    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="+")
    pool = models.ForeignKey(CapacityPool, on_delete=models.CASCADE, related_name="+")
    api_key = models.ForeignKey("orgs.ApiKey", on_delete=models.CASCADE, null=True,
                                blank=True, related_name="+")
    minute = models.DateTimeField()
    code = models.CharField(max_length=40)
    count = models.PositiveIntegerField()

    FORMER_LABELS = ("quotas.refusalminute",)

    class Meta:
        db_table = "quotas_refusalminute"
        constraints = [
            models.UniqueConstraint(fields=["org", "pool", "api_key", "minute", "code"],
                                    nulls_distinct=False, name="refusal_minute_unique"),
        ]
        indexes = [models.Index(fields=["org", "minute"], name="refusal_org_minute")]

    def __str__(self) -> str:
        return f"{self.count} × {self.code} for {self.org_id} @ {self.minute:%Y-%m-%d %H:%M}"
