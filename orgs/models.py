from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone


class OrgStatus(models.TextChoices):
    APPLIED = "applied", "Applied"
    IN_REVIEW = "in_review", "In review"
    APPROVED = "approved", "Approved (waitlisted)"
    ACTIVE = "active", "Active"
    REJECTED = "rejected", "Rejected"
    SUSPENDED = "suspended", "Suspended"
    OFFBOARDED = "offboarded", "Offboarded"


class SuspensionReason(models.TextChoices):
    OPERATOR = "operator", "Suspended by an operator"
    PAYMENT = "payment", "Suspended for non-payment"


class Organization(models.Model):
    name = models.CharField(max_length=200)
    slug = models.SlugField(max_length=80, unique=True)
    status = models.CharField(
        max_length=16, choices=OrgStatus.choices, default=OrgStatus.APPLIED, db_index=True
    )
    suspension_reason = models.CharField(
        max_length=16, choices=SuspensionReason.choices, blank=True, default=""
    )
    status_changed_at = models.DateTimeField(default=timezone.now)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                name="org_status_valid", condition=Q(status__in=OrgStatus.values)
            ),
            models.CheckConstraint(
                name="org_suspension_reason_only_when_suspended",
                condition=Q(status=OrgStatus.SUSPENDED) | Q(suspension_reason=""),
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_active(self) -> bool:
        return self.status == OrgStatus.ACTIVE


class Role(models.TextChoices):
    OWNER = "owner", "Owner"
    ADMIN = "admin", "Admin"
    DEVELOPER = "developer", "Developer"
    BILLING = "billing", "Billing"
    VIEWER = "viewer", "Viewer"


# Roles allowed to manage members and invitations.
MEMBER_MANAGERS = frozenset({Role.OWNER, Role.ADMIN})
# Roles allowed to grant, change or remove the owner role, and to invite owners.
OWNER_MANAGERS = frozenset({Role.OWNER})
# Roles allowed to create and revoke API keys.
KEY_MANAGERS = frozenset({Role.OWNER, Role.ADMIN, Role.DEVELOPER})
# Roles allowed to set a key's own slice of the org's limits and its default service tier.
KEY_LIMIT_MANAGERS = frozenset({Role.OWNER, Role.ADMIN})
# Roles allowed to see money.
BILLING_READERS = frozenset({Role.OWNER, Role.BILLING})


class Membership(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["org", "user"], name="membership_unique_user_per_org"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.org} ({self.role})"


class Invitation(models.Model):
    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField()
    role = models.CharField(max_length=16, choices=Role.choices)
    lookup = models.CharField(max_length=12, unique=True)
    token_digest = models.CharField(max_length=64)
    invited_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
        related_name="+",
    )
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"Invitation of {self.email} to {self.org}"

    def is_pending(self, *, now=None) -> bool:
        now = now or timezone.now()
        return self.accepted_at is None and self.revoked_at is None and self.expires_at > now


class ServiceTier(models.TextChoices):
    """OpenAI's vocabulary: `priority` is served by fast pools, `default` by standard ones,
    `auto` by the fast pool first, spilling to the standard one when the fast pool refuses."""
    AUTO = "auto", "Auto (fast, standard when the fast tier is full)"
    PRIORITY = "priority", "Priority (fast tier only)"
    DEFAULT = "default", "Default (standard tier only)"


class ApiKey(models.Model):
    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100)
    lookup = models.CharField(max_length=12, unique=True)
    digest = models.CharField(max_length=64)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    # The tier of this key's requests that ask for `auto` (a batch key stays on standard).
    default_service_tier = models.CharField(max_length=16, choices=ServiceTier.choices,
                                            default=ServiceTier.AUTO)
    # The key's own slice of its org's allocation, in every pool (empty: the org's alone).
    slice_output_tps = models.PositiveIntegerField(null=True, blank=True)
    slice_input_tps = models.PositiveIntegerField(null=True, blank=True)
    slice_daily_tokens = models.PositiveBigIntegerField(null=True, blank=True)
    slice_max_concurrency = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["org", "-created_at"], name="apikey_org_created")]
        constraints = [
            models.CheckConstraint(
                name="apikey_slice_positive",
                condition=(Q(slice_output_tps__isnull=True) | Q(slice_output_tps__gt=0))
                & (Q(slice_input_tps__isnull=True) | Q(slice_input_tps__gt=0))
                & (Q(slice_daily_tokens__isnull=True) | Q(slice_daily_tokens__gt=0))
                & (Q(slice_max_concurrency__isnull=True) | Q(slice_max_concurrency__gt=0))),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.display_prefix}…)"

    @property
    def display_prefix(self) -> str:
        return f"sk_{self.lookup}"

    def is_usable(self, *, now=None) -> bool:
        """Usable as far as the key itself goes; the org must also be active."""
        now = now or timezone.now()
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > now)

    @property
    def has_slice(self) -> bool:
        return any(v is not None for v in (self.slice_output_tps, self.slice_input_tps,
                                           self.slice_daily_tokens, self.slice_max_concurrency))


class AdminKeyQuerySet(models.QuerySet):
    def with_creator_role(self) -> "AdminKeyQuerySet":
        """Each key's `creator_role`: its creator's current role in the key's org, which is
        what the key may do (None: the creator left, or no person made it)."""
        role = Membership.objects.filter(org_id=models.OuterRef("org_id"),
                                         user_id=models.OuterRef("created_by_id"))
        return self.annotate(creator_role=models.Subquery(role.values("role")[:1]))


class AdminKey(models.Model):
    """An organization's admin key (`sk_admin_...`): it authenticates the org-facing REST API
    (usage, costs, API key management) for scripts and dashboards, and nothing else. It is a
    model of its own, not a kind of ApiKey, so that it can never reach the admission engine:
    the bridge publishes ApiKey digests only, and authorize answers `invalid_api_key` to it."""

    org = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="admin_keys")
    name = models.CharField(max_length=100)
    lookup = models.CharField(max_length=12, unique=True)
    digest = models.CharField(max_length=64)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    objects = AdminKeyQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["org", "-created_at"], name="adminkey_org_created")]

    def __str__(self) -> str:
        return f"{self.name} ({self.display_prefix}…)"

    @property
    def display_prefix(self) -> str:
        return f"sk_admin_{self.lookup}"


class AuditEvent(models.Model):
    """Append-only: a database trigger (migration 0002) refuses UPDATE and DELETE."""

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True,
        related_name="+",
    )
    # Who acted when there is no user: "system", "celery:wave_open", "gateway:<name>", "stripe".
    actor_label = models.CharField(max_length=100, blank=True, default="")
    org = models.ForeignKey(
        Organization, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    action = models.CharField(max_length=64)
    target_type = models.CharField(max_length=64)
    target_id = models.CharField(max_length=64)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    reason = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["org", "-created_at"], name="audit_org_created"),
            models.Index(fields=["action", "-created_at"], name="audit_action_created"),
            models.Index(fields=["target_type", "target_id"], name="audit_target"),
        ]

    def __str__(self) -> str:
        return f"{self.action} on {self.target_type}:{self.target_id}"


class OperatorToken(models.Model):
    """Bearer tokens for operator scripts against the REST API, acting as `user`."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="operator_tokens"
    )
    name = models.CharField(max_length=100)
    lookup = models.CharField(max_length=12, unique=True)
    digest = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.user})"


# --- Waitlist applications and vetting ----------------------------------------------------------


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
    # Operators may replace the computed priority score (orgs/scoring.py), always with a reason.
    score_override = models.IntegerField(null=True, blank=True)
    score_override_reason = models.TextField(blank=True, default="")
    score_override_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL,
                                          null=True, blank=True, related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
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

    class Meta:
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

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"Note on application #{self.application_id}"
