from decimal import ROUND_FLOOR, Decimal

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


LEASE_TTL_SECONDS = (6, 600)  # the range an operator may set
LEASE_TTL_DEFAULT_SECONDS = 15


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
    # How long a lease (a reservation its gateway renews by heartbeat, docs/hook.md) holds its
    # slot without one: what a crashed gateway costs in capacity, against how late a
    # heartbeat may be.
    lease_ttl_seconds = models.PositiveSmallIntegerField(default=LEASE_TTL_DEFAULT_SECONDS)
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
    # The longest a request may wait in this pool's admission queue (admission/); 0: no queue.
    queue_max_wait_ms = models.PositiveIntegerField(default=0)
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
            models.CheckConstraint(
                name="pool_lease_ttl_in_range",
                condition=Q(lease_ttl_seconds__gte=LEASE_TTL_SECONDS[0])
                & Q(lease_ttl_seconds__lte=LEASE_TTL_SECONDS[1]),
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


class BookingState(models.TextChoices):
    CONFIRMED = "confirmed", "Confirmed"
    ACTIVE = "active", "In force"
    ENDED = "ended", "Ended"
    CANCELLED = "cancelled", "Cancelled"


# The states in which a booking holds capacity: the ledger counts it over its window.
BOOKING_LIVE_STATES = (BookingState.CONFIRMED, BookingState.ACTIVE)


class Booking(models.Model):
    """Extra guaranteed tokens/s an org booked in a pool for the window [starts_at, ends_at),
    UTC, on top of its allocation. It counts against the pool over its window until it is
    cancelled (the ledger, quotas/bookings.py); its price and refund are billing's. `state`
    follows the clock (bookings_advance); the limiter does not wait for it."""

    org = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="bookings")
    pool = models.ForeignKey(CapacityPool, on_delete=models.PROTECT, related_name="bookings")
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    output_tps = models.PositiveIntegerField()
    # Only where the pool meters input apart (a prefill capacity); 0 elsewhere.
    input_tps = models.PositiveIntegerField(default=0)
    # Added to the allocation's daily tokens while the window is in force.
    extra_daily_tokens = models.PositiveBigIntegerField(default=0)
    state = models.CharField(max_length=16, choices=BookingState.choices,
                             default=BookingState.CONFIRMED)
    created_by = models.ForeignKey("auth.User", on_delete=models.SET_NULL, null=True,
                                   blank=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    cancelled_at = models.DateTimeField(null=True, blank=True)
    cancel_reason = models.CharField(max_length=500, blank=True, default="")
    # Cancelled by an operator or by a change of the pool (capacity lowered, the allocation
    # ended): the org is refunded in full, whatever the refund rule says.
    cancelled_by_operator = models.BooleanField(default=False)

    class Meta:
        ordering = ["starts_at", "id"]
        constraints = [
            models.CheckConstraint(name="booking_window_ordered",
                                   condition=Q(ends_at__gt=F("starts_at"))),
            models.CheckConstraint(name="booking_output_positive", condition=Q(output_tps__gt=0)),
            models.CheckConstraint(name="booking_state_valid",
                                   condition=Q(state__in=BookingState.values)),
        ]
        indexes = [
            # The ledger's read: a pool's live bookings overlapping a window.
            models.Index(fields=["pool", "ends_at", "starts_at"], name="booking_pool_live",
                         condition=Q(state__in=["confirmed", "active"])),
            models.Index(fields=["org", "-starts_at"], name="booking_org_start"),
        ]

    def __str__(self) -> str:
        return (f"{self.output_tps} tokens/s in {self.pool} "
                f"{self.starts_at:%Y-%m-%d %H:%M}–{self.ends_at:%H:%M} UTC")

    @property
    def is_live(self) -> bool:
        return self.state in BOOKING_LIVE_STATES

    def phase_at(self, now) -> str:
        """The state as the clock has it (the stored one follows within a minute)."""
        if not self.is_live:
            return self.state
        if now >= self.ends_at:
            return BookingState.ENDED
        return BookingState.ACTIVE if now >= self.starts_at else BookingState.CONFIRMED
