"""Status and human message for every authorize refusal code."""

REFUSALS: dict[str, tuple[int, str]] = {
    "invalid_api_key": (401, "The API key is unknown, revoked or expired, or has no access to "
                             "this model."),
    "org_not_active": (403, "The organization is not active (waitlisted, suspended or "
                            "offboarded)."),
    "payment_required": (403, "The organization is suspended for non-payment."),
    "no_allocation": (403, "The organization has no allocation in this pool."),
    "spend_cap_reached": (403, "The organization's monthly spend cap is reached."),
    "request_id_conflict": (409, "This request_id is already used by another organization."),
    "concurrency_exceeded": (429, "Too many concurrent requests for this organization."),
    "daily_quota_exhausted": (429, "The organization's daily token quota is used up until "
                                   "00:00 UTC."),
    "tps_exceeded": (429, "The organization's tokens-per-second budget is exhausted (a request "
                          "larger than the whole budget never fits: lower max_output_tokens)."),
    "pool_capacity_exhausted": (429, "The pool has no spare capacity to lend for a burst."),
    "queue_timeout": (429, "No capacity freed for this request within its wait budget "
                           "(queue_threshold_ms)."),
    "queue_full": (429, "The pool's admission queue (or the organization's share of it) is "
                        "full."),
}

LIMITER_UNAVAILABLE = ("The admission engine is unreachable and this pool fails closed; "
                       "retry shortly.")

# Refusals that the same request may pass soon (the others answer `retryable: false`, and the
# gateway tells its caller `x-should-retry: false`): a bucket refills, a slot frees, Redis
# comes back. A daily quota returns at midnight and everything else needs a person.
RETRYABLE = frozenset({"tps_exceeded", "concurrency_exceeded", "pool_capacity_exhausted",
                       "limiter_unavailable", "internal_error",
                       "database_unavailable", "queue_timeout", "queue_full"})
# How long a gateway should wait before asking again while the limiter is unreachable.
LIMITER_UNAVAILABLE_RETRY_MS = 1000
