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
    # How long its requests may wait for capacity when they do not say (queue_threshold_ms),
    # unless their API key says; none: refused at once. The pool's maximum clamps it.
    queue_threshold_default_ms = models.PositiveIntegerField(null=True, blank=True)
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
    # The wait budget of its requests that do not say (else the org's; see Organization).
    queue_threshold_default_ms = models.PositiveIntegerField(null=True, blank=True)

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
