"""The rollout: waitlist applications and their vetting, waves that add capacity and admit
orgs, each pool's waitlist settings, the pool an org queues for, and quota requests.

These models moved here from the orgs and quotas apps and keep their tables (`db_table`);
audit rows written before the move name them by the old label (`FORMER_LABELS`, read by
orgs/selectors.py).
"""

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from orgs.models import Organization
from quotas.models import CapacityPool


class UseCase(models.TextChoices):
    VOICE = "voice", "Voice"
    AGENTS = "agents", "Agents"
    CODING = "coding", "Coding"
    CHAT = "chat", "Chat"
    BATCH = "batch", "Batch"
    OTHER = "other", "Other"


class LatencySensitivity(models.TextChoices):
    REALTIME = "realtime", "Real-time: a person waits on every token (voice, live agents)"
    INTERACTIVE = "interactive", "Interactive: a person waits on the answer"
    TOLERANT = "tolerant", "Tolerant: seconds do not matter much"
    NONE = "none", "None: offline or batch work"


class ApplicationState(models.TextChoices):
    SUBMITTED = "submitted", "Submitted"
    IN_REVIEW = "in_review", "In review"
    INFO_REQUESTED = "info_requested", "More information requested"
    APPROVED = "approved", "Approved (waitlisted)"
    ADMITTED = "admitted", "Admitted"
    REJECTED = "rejected", "Rejected"


# An org may have at most one application in these states (a partial unique index enforces it).
OPEN_APPLICATION_STATES = (
    ApplicationState.SUBMITTED, ApplicationState.IN_REVIEW, ApplicationState.INFO_REQUESTED,
    ApplicationState.APPROVED,
)


class Decision(models.TextChoices):
    APPROVE = "approve", "Approve"
    REJECT = "reject", "Reject"
    REQUEST_INFO = "request_info", "Request more information"


class Application(models.Model):
    org = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="applications")
    state = models.CharField(max_length=16, choices=ApplicationState.choices,
                             default=ApplicationState.SUBMITTED)
    legal_name = models.CharField(max_length=200)
    website = models.URLField(max_length=300)
    country = models.CharField(max_length=2, help_text="ISO 3166-1 alpha-2 code")
    contact_name = models.CharField(max_length=200)
    contact_email = models.EmailField()
    use_case = models.CharField(max_length=16, choices=UseCase.choices)
    use_case_description = models.TextField()
    expected_peak_tps = models.PositiveIntegerField()
    expected_daily_tokens = models.PositiveBigIntegerField()
    latency_sensitivity = models.CharField(max_length=16, choices=LatencySensitivity.choices)
    preferred_region = models.CharField(max_length=50)
    submitted_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL,
                                     null=True, related_name="+")
    submitted_at = models.DateTimeField(default=timezone.now)
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True,
                                 blank=True, related_name="+")
    decision = models.CharField(max_length=16, choices=Decision.choices, blank=True, default="")
    # Internal reason (audit, operators) and the part an operator chose to tell the org.
    decision_reason = models.TextField(blank=True, default="")
    shared_reason = models.TextField(blank=True, default="")
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL,
                                   null=True, blank=True, related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)
    # Operators may replace the computed priority score (rollout/scoring.py), always with a reason.
    score_override = models.IntegerField(null=True, blank=True)
    score_override_reason = models.TextField(blank=True, default="")
    score_override_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL,
                                          null=True, blank=True, related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    # Audit rows written before the model moved here name it by its old label.
    FORMER_LABELS = ("orgs.application",)

    class Meta:
        db_table = "orgs_application"
        ordering = ["-submitted_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["org"], condition=Q(state__in=OPEN_APPLICATION_STATES),
                name="application_one_open_per_org",
            ),
            models.CheckConstraint(name="application_state_valid",
                                   condition=Q(state__in=ApplicationState.values)),
            models.CheckConstraint(name="application_peak_tps_positive",
                                   condition=Q(expected_peak_tps__gt=0)),
            models.CheckConstraint(name="application_daily_tokens_positive",
                                   condition=Q(expected_daily_tokens__gt=0)),
            models.CheckConstraint(
                name="application_override_has_reason",
                condition=Q(score_override__isnull=True) | ~Q(score_override_reason=""),
            ),
        ]
        indexes = [models.Index(fields=["state", "submitted_at"], name="application_state_sub")]

    def __str__(self) -> str:
        return f"Application #{self.pk} of {self.org}"

    @property
    def is_open(self) -> bool:
        return self.state in OPEN_APPLICATION_STATES


class CheckItem(models.TextChoices):
    IDENTITY_VERIFIED = "identity_verified", "Identity verified"
    USE_CASE_ACCEPTABLE = "use_case_acceptable", "Use case acceptable"
    CONTACT_REACHABLE = "contact_reachable", "Contact reachable"
    PAYMENT_METHOD_ON_FILE = "payment_method_on_file", "Payment method on file"


# Approval needs these ticked. A payment method is ticked by billing (actor "stripe") once the
# admitted org's Stripe customer has one, so it cannot gate approval.
CHECKS_REQUIRED_FOR_APPROVAL = (
    CheckItem.IDENTITY_VERIFIED, CheckItem.USE_CASE_ACCEPTABLE, CheckItem.CONTACT_REACHABLE,
)


# What an operator vouched for by ticking an item: when the applicant changes one of these
# answers, the tick is undone and the item must be checked again.
CHECK_VOUCHES_FOR = {
    CheckItem.IDENTITY_VERIFIED: ("legal_name", "website", "country"),
    CheckItem.CONTACT_REACHABLE: ("contact_name", "contact_email"),
    CheckItem.USE_CASE_ACCEPTABLE: ("use_case", "use_case_description"),
}


class ApplicationCheck(models.Model):
    application = models.ForeignKey(Application, on_delete=models.CASCADE,
                                     related_name="checks")
    item = models.CharField(max_length=32, choices=CheckItem.choices)
    done = models.BooleanField(default=False)
    done_by_label = models.CharField(max_length=100, blank=True, default="")
    done_at = models.DateTimeField(null=True, blank=True)
    note = models.TextField(blank=True, default="")

    FORMER_LABELS = ("orgs.applicationcheck",)

    class Meta:
        db_table = "orgs_applicationcheck"
        ordering = ["application_id", "id"]
        constraints = [
            models.UniqueConstraint(fields=["application", "item"],
                                    name="application_check_unique_item"),
        ]

    def __str__(self) -> str:
        return f"{self.get_item_display()}: {'done' if self.done else 'open'}"


class ApplicationNote(models.Model):
    application = models.ForeignKey(Application, on_delete=models.CASCADE,
                                     related_name="notes")
    author = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True,
                               related_name="+")
    body = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)

    FORMER_LABELS = ("orgs.applicationnote",)

    class Meta:
        db_table = "orgs_applicationnote"
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"Note on application #{self.application_id}"


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

    # Audit rows written before the model moved here name it by its old label.
    FORMER_LABELS = ("quotas.rolloutwave",)

    class Meta:
        db_table = "quotas_rolloutwave"
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
    # rule at 0 each request waits for an operator. See rollout/quota_requests.py.
    quota_auto_approve_max_tps = models.PositiveIntegerField(default=0)
    quota_auto_approve_max_burst_tps = models.PositiveIntegerField(default=0)
    quota_auto_approve_max_daily_tokens = models.PositiveBigIntegerField(default=0)
    quota_auto_approve_max_concurrency = models.PositiveIntegerField(default=0)
    quota_auto_approve_window_days = models.PositiveSmallIntegerField(
        default=30, validators=[MinValueValidator(1), MaxValueValidator(366)])
    updated_at = models.DateTimeField(auto_now=True)

    FORMER_LABELS = ("quotas.pooladmission",)

    class Meta:
        db_table = "quotas_pooladmission"

    def __str__(self) -> str:
        return f"{self.pool}: auto-admission {'on' if self.auto_admit else 'off'}"


class OrgPoolPreference(models.Model):
    """The pool an org queues for. Set from the application's preferred region when exactly one
    fast pool serves it, otherwise (or to change it) by an operator."""

    org = models.OneToOneField(Organization, on_delete=models.CASCADE, primary_key=True,
                               related_name="pool_preference")
    pool = models.ForeignKey(CapacityPool, on_delete=models.PROTECT, related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    FORMER_LABELS = ("quotas.orgpoolpreference",)

    class Meta:
        db_table = "quotas_orgpoolpreference"

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

    FORMER_LABELS = ("quotas.quotarequest",)

    class Meta:
        db_table = "quotas_quotarequest"
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
