from decimal import ROUND_FLOOR, Decimal

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from orgs.models import Organization


class Tier(models.TextChoices):
    FAST = "fast", "Fast"
    STANDARD = "standard", "Standard"


class LimiterFailurePolicy(models.TextChoices):
    FAIL_CLOSED = "fail_closed", "Fail closed (refuse traffic)"
    FAIL_OPEN = "fail_open", "Fail open (local per-process limit)"


class CapacityPool(models.Model):
    """One model in one region on one tier: a finite fleet measured in output tokens/s
    (decode) and, when declared, input tokens/s (prefill)."""

    model = models.CharField(max_length=100)
    region = models.CharField(max_length=50)
    tier = models.CharField(max_length=16, choices=Tier.choices, default=Tier.FAST)
    # Decode: output tokens/s. Without a prefill capacity, input tokens count against it too
    # (what every pool did before input was metered apart).
    capacity_tps = models.PositiveIntegerField()
    # Prefill: input tokens/s, metered apart from output (cached input tokens excluded).
    prefill_capacity_tps = models.PositiveIntegerField(null=True, blank=True)
    # What authorize reserves for output before an org has history (then the p95 of its
    # recent outputs), and the least an estimate reserves.
    output_estimate_default = models.PositiveIntegerField(default=4096)
    output_estimate_floor = models.PositiveIntegerField(default=64)
    # Share of capacity that may be promised as guarantees; the rest is headroom for bursts.
    guaranteeable_ratio = models.DecimalField(max_digits=4, decimal_places=3,
                                              default=Decimal("0.900"))
    limiter_failure_policy = models.CharField(
        max_length=16, choices=LimiterFailurePolicy.choices,
        default=LimiterFailurePolicy.FAIL_CLOSED,
    )
    # The fast tier's promise. A request delivered slower than the floor, or whose first token
    # came later than the ceiling, is not premium-eligible (billed at list price only).
    speed_floor_output_tps = models.PositiveIntegerField(default=300)
    ttft_ceiling_ms = models.PositiveIntegerField(default=2000)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["model", "region", "tier"]
        constraints = [
            models.UniqueConstraint(fields=["model", "region", "tier"], name="pool_unique"),
            models.CheckConstraint(
                name="pool_ratio_in_range",
                condition=Q(guaranteeable_ratio__gt=0) & Q(guaranteeable_ratio__lte=1),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.model} · {self.region} · {self.tier}"

    @staticmethod
    def guaranteeable_for(capacity_tps: int, ratio: Decimal) -> int:
        # Floor: a fractional token/s of guarantee is never promised.
        return int((Decimal(capacity_tps) * ratio).to_integral_value(rounding=ROUND_FLOOR))

    @property
    def guaranteeable_tps(self) -> int:
        return self.guaranteeable_for(self.capacity_tps, self.guaranteeable_ratio)

    @property
    def guaranteeable_input_tps(self) -> int | None:
        if self.prefill_capacity_tps is None:
            return None
        return self.guaranteeable_for(self.prefill_capacity_tps, self.guaranteeable_ratio)

    @property
    def meters_input_apart(self) -> bool:
        return self.prefill_capacity_tps is not None


class AllocationStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    ENDED = "ended", "Ended"


class Allocation(models.Model):
    """What one org may use of one pool. Only ACTIVE allocations count against the pool.
    TPS are output tokens/s (with input, in a pool without a prefill capacity); the input
    ones are set exactly when the pool declares a prefill capacity."""

    org = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="allocations")
    pool = models.ForeignKey(CapacityPool, on_delete=models.PROTECT, related_name="allocations")
    guaranteed_tps = models.PositiveIntegerField()
    burst_tps = models.PositiveIntegerField()
    guaranteed_input_tps = models.PositiveIntegerField(null=True, blank=True)
    burst_input_tps = models.PositiveIntegerField(null=True, blank=True)
    daily_tokens = models.PositiveBigIntegerField()
    max_concurrency = models.PositiveIntegerField()
    status = models.CharField(max_length=16, choices=AllocationStatus.choices,
                              default=AllocationStatus.ACTIVE)
    valid_from = models.DateTimeField(default=timezone.now)
    valid_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["pool_id", "org_id"]
        constraints = [
            models.UniqueConstraint(
                fields=["org", "pool"], condition=Q(status="active"),
                name="allocation_one_active_per_org_pool",
            ),
            models.CheckConstraint(name="allocation_burst_ge_guaranteed",
                                   condition=Q(burst_tps__gte=F("guaranteed_tps"))),
            models.CheckConstraint(
                name="allocation_input_both_or_neither",
                condition=Q(guaranteed_input_tps__isnull=True, burst_input_tps__isnull=True)
                | Q(guaranteed_input_tps__gt=0,
                    burst_input_tps__gte=F("guaranteed_input_tps"))),
            models.CheckConstraint(name="allocation_guaranteed_positive",
                                   condition=Q(guaranteed_tps__gt=0)),
            models.CheckConstraint(name="allocation_concurrency_positive",
                                   condition=Q(max_concurrency__gt=0)),
            models.CheckConstraint(
                name="allocation_validity_ordered",
                condition=Q(valid_until__isnull=True) | Q(valid_until__gt=F("valid_from")),
            ),
        ]
        indexes = [models.Index(fields=["pool", "status"], name="allocation_pool_status")]

    def __str__(self) -> str:
        return f"{self.org} in {self.pool}: {self.guaranteed_tps} TPS"


class GatewayToken(models.Model):
    """A gateway's own credential for the hook API (`Authorization: Bearer gw_...`)."""

    name = models.CharField(max_length=100)
    lookup = models.CharField(max_length=12, unique=True)
    digest = models.CharField(max_length=64)
    created_by = models.ForeignKey(
        "auth.User", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.name


# --- Rollout waves and the waitlist (issue 4) -------------------------------------------------


class WaveState(models.TextChoices):
    SCHEDULED = "scheduled", "Scheduled"
    OPEN = "open", "Open"
    CLOSED = "closed", "Closed"


class RolloutWave(models.Model):
    """Capacity added to a pool at `opens_at`, and the approved orgs it admits with the default
    allocation. Opening is claimed with a conditional UPDATE (scheduled -> open), so it happens
    once even if two workers try at the same time."""

    pool = models.ForeignKey(CapacityPool, on_delete=models.PROTECT, related_name="waves")
    name = models.CharField(max_length=200)
    opens_at = models.DateTimeField()
    closes_at = models.DateTimeField(null=True, blank=True)
    capacity_tps = models.PositiveIntegerField(help_text="Tokens/s added to the pool on opening")
    max_orgs = models.PositiveIntegerField()
    guaranteed_tps = models.PositiveIntegerField()
    burst_tps = models.PositiveIntegerField()
    daily_tokens = models.PositiveBigIntegerField()
    max_concurrency = models.PositiveIntegerField()
    state = models.CharField(max_length=16, choices=WaveState.choices,
                             default=WaveState.SCHEDULED)
    opened_at = models.DateTimeField(null=True, blank=True)
    closed_at = models.DateTimeField(null=True, blank=True)
    admitted_count = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey("auth.User", on_delete=models.SET_NULL, null=True,
                                   blank=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["opens_at", "id"]
        constraints = [
            models.CheckConstraint(name="wave_state_valid",
                                   condition=Q(state__in=WaveState.values)),
            models.CheckConstraint(name="wave_max_orgs_positive", condition=Q(max_orgs__gt=0)),
            models.CheckConstraint(name="wave_guaranteed_positive",
                                   condition=Q(guaranteed_tps__gt=0)),
            models.CheckConstraint(name="wave_burst_ge_guaranteed",
                                   condition=Q(burst_tps__gte=F("guaranteed_tps"))),
            models.CheckConstraint(name="wave_concurrency_positive",
                                   condition=Q(max_concurrency__gt=0)),
            models.CheckConstraint(
                name="wave_closes_after_opens",
                condition=Q(closes_at__isnull=True) | Q(closes_at__gt=F("opens_at")),
            ),
        ]
        indexes = [models.Index(fields=["state", "opens_at"], name="wave_state_opens")]

    def __str__(self) -> str:
        return f"{self.name} ({self.pool})"


class PoolAdmission(models.Model):
    """Per-pool waitlist settings. With `auto_admit` on, capacity freed in the pool (an
    allocation ended or reduced) admits the next queued orgs with the default allocation of the
    pool's latest opened wave. Off by default: operators usually prefer to admit in waves."""

    pool = models.OneToOneField(CapacityPool, on_delete=models.CASCADE, primary_key=True,
                                related_name="admission")
    auto_admit = models.BooleanField(default=False)
    # Auto-approval of quota requests: the most each dimension of an org's allocation in this
    # pool may grow without an operator, counting every request auto-approved for that org in
    # the pool within the window. A dimension whose rule is 0 may not grow at all; with every
    # rule at 0 each request waits for an operator. See quotas/quota_requests.py.
    quota_auto_approve_max_tps = models.PositiveIntegerField(default=0)
    quota_auto_approve_max_burst_tps = models.PositiveIntegerField(default=0)
    quota_auto_approve_max_daily_tokens = models.PositiveBigIntegerField(default=0)
    quota_auto_approve_max_concurrency = models.PositiveIntegerField(default=0)
    quota_auto_approve_window_days = models.PositiveSmallIntegerField(
        default=30, validators=[MinValueValidator(1), MaxValueValidator(366)])
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.pool}: auto-admission {'on' if self.auto_admit else 'off'}"


class OrgPoolPreference(models.Model):
    """The pool an org queues for. Set from the application's preferred region when exactly one
    fast pool serves it, otherwise (or to change it) by an operator."""

    org = models.OneToOneField(Organization, on_delete=models.CASCADE, primary_key=True,
                               related_name="pool_preference")
    pool = models.ForeignKey(CapacityPool, on_delete=models.PROTECT, related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"{self.org} queues for {self.pool}"


class QuotaRequestStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    APPROVED = "approved", "Approved"
    DENIED = "denied", "Denied"
    CANCELLED = "cancelled", "Cancelled"


# The most one quota request may ask, checked before any rule runs. 10 million tokens/s is
# beyond any fleet a pool describes; 10^12 tokens a day is more than such a fleet makes in a day.
QUOTA_REQUEST_TPS_MAX = 10_000_000
QUOTA_REQUEST_DAILY_TOKENS_MAX = 10**12
QUOTA_REQUEST_CONCURRENCY_MAX = 100_000


class QuotaRequest(models.Model):
    """An org asks for a bigger allocation in a pool: the limits it wants, in full (not deltas),
    so approving is one `allocation_change` (or a first `allocation_grant`) with the capacity
    check."""

    org = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="+")
    pool = models.ForeignKey(CapacityPool, on_delete=models.PROTECT, related_name="+")
    guaranteed_tps = models.PositiveIntegerField()
    burst_tps = models.PositiveIntegerField()
    daily_tokens = models.PositiveBigIntegerField()
    max_concurrency = models.PositiveIntegerField()
    reason = models.TextField()
    status = models.CharField(max_length=16, choices=QuotaRequestStatus.choices,
                              default=QuotaRequestStatus.PENDING)
    requested_by = models.ForeignKey("auth.User", on_delete=models.SET_NULL, null=True,
                                     blank=True, related_name="+")
    decided_by = models.CharField(max_length=150, blank=True, default="")
    decision_reason = models.TextField(blank=True, default="")
    decided_at = models.DateTimeField(null=True, blank=True)
    # The allocation's limits just before an approval applied this request (null: it granted a
    # first allocation): what the request raised, which auto-approval's window adds up.
    previous_limits = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["org", "pool"], condition=Q(status="pending"),
                                    name="quota_request_one_pending_per_org_pool"),
            models.CheckConstraint(name="quota_request_burst_ge_guaranteed",
                                   condition=Q(burst_tps__gte=F("guaranteed_tps"))),
        ]
        indexes = [models.Index(fields=["status", "created_at"], name="quota_request_inbox")]

    def __str__(self) -> str:
        return f"{self.org} asks {self.guaranteed_tps} TPS in {self.pool} ({self.status})"
