"""The only module that imports `stripe`.

It builds a `StripeClient` from settings (key, base URL, pinned API version), makes the calls
billing needs with the idempotency key the caller derives from our ids, hands back plain values
(never Stripe objects), and turns Stripe's errors into ours:
- StripeUnavailable: worth retrying (network, 5xx, rate limit, lock timeout);
- StripeRejected: retrying the same request cannot succeed (bad request, auth, card).
"""

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import stripe
from django.conf import settings

from sluice.errors import DomainError

# Pinned: a Stripe account upgrade must not change what our code receives.
STRIPE_API_VERSION = "2026-10-28.endive"
WEBHOOK_TOLERANCE_SECONDS = 300


class StripeUnavailable(DomainError):
    status = 503
    code = "stripe_unavailable"


class StripeRejected(DomainError):
    status = 502
    code = "stripe_rejected"


class WebhookSignatureInvalid(DomainError):
    status = 400
    code = "invalid_signature"


@dataclass(frozen=True)
class StripeInvoice:
    id: str
    status: str
    total_cents: int
    metadata: dict


_RETRYABLE = (stripe.APIConnectionError, stripe.APIError, stripe.RateLimitError)


@contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except _RETRYABLE as exc:
        raise StripeUnavailable(f"Stripe is unavailable: {exc.user_message or exc}") from exc
    except stripe.StripeError as exc:
        # Stripe answers 409 for a request still in flight under the same idempotency key.
        if exc.http_status in (409, 429) or (exc.http_status or 0) >= 500:
            raise StripeUnavailable(f"Stripe is busy: {exc.user_message or exc}") from exc
        raise StripeRejected(f"Stripe refused the request: {exc.user_message or exc}",
                             details={"http_status": exc.http_status,
                                      "stripe_code": exc.code}) from exc


def _client() -> stripe.StripeClient:
    if not settings.STRIPE_API_KEY:
        raise StripeRejected("STRIPE_API_KEY is not set.", code="stripe_not_configured")
    return stripe.StripeClient(
        settings.STRIPE_API_KEY,
        base_addresses={"api": settings.STRIPE_API_BASE},
        stripe_version=STRIPE_API_VERSION,
        # The outbox owns retries (with backoff and dead letters); the client does not.
        max_network_retries=0,
    )


def _options(key: str) -> dict:
    return {"idempotency_key": key}


def customer_create(*, name: str, org_id: int, idempotency_key: str) -> str:
    with _translated():
        customer = _client().v1.customers.create(
            params={"name": name, "metadata": {"sluice_org_id": str(org_id)}},
            options=_options(idempotency_key))
    return customer.id


def _as_invoice(obj) -> StripeInvoice:
    return StripeInvoice(id=obj.id, status=obj.status or "", total_cents=int(obj.total or 0),
                         metadata=obj.metadata.to_dict() if obj.metadata else {})


def invoice_create(*, customer_id: str, invoice_id: int, number: str, idempotency_key: str,
                   supplements: str = "") -> StripeInvoice:
    description = f"Sluice invoice {number}"
    if supplements:  # a supplement of late usage says which invoice it adds to
        description += f": usage reported after invoice {supplements}"
    # auto_advance off while we add items: Stripe would otherwise finalize the draft on its own
    # an hour later, possibly with half its lines if our push stalled during an outage.
    params = {
        "customer": customer_id, "collection_method": "charge_automatically",
        "auto_advance": False, "currency": "usd", "description": description,
        "pending_invoice_items_behavior": "exclude",
        "metadata": {"sluice_invoice_id": str(invoice_id), "sluice_number": number},
    }
    with _translated():
        return _as_invoice(_client().v1.invoices.create(params=params,
                                                        options=_options(idempotency_key)))


def invoice_item_add(*, customer_id: str, stripe_invoice_id: str, amount_cents: int,
                     description: str, idempotency_key: str) -> str:
    params = {"customer": customer_id, "invoice": stripe_invoice_id, "amount": amount_cents,
              "currency": "usd", "description": description}
    with _translated():
        item = _client().v1.invoice_items.create(params=params,
                                                 options=_options(idempotency_key))
    return item.id


def invoice_finalize(*, stripe_invoice_id: str, idempotency_key: str) -> StripeInvoice:
    with _translated():
        # Now complete: let Stripe collect it (charge, retries, invoice.paid/payment_failed).
        return _as_invoice(_client().v1.invoices.finalize_invoice(
            stripe_invoice_id, params={"auto_advance": True},
            options=_options(idempotency_key)))


def invoice_void(*, stripe_invoice_id: str, idempotency_key: str) -> StripeInvoice:
    with _translated():
        return _as_invoice(_client().v1.invoices.void_invoice(
            stripe_invoice_id, options=_options(idempotency_key)))


def invoice_retrieve(*, stripe_invoice_id: str) -> StripeInvoice | None:
    try:
        with _translated():
            return _as_invoice(_client().v1.invoices.retrieve(stripe_invoice_id))
    except StripeRejected as exc:
        if exc.details.get("http_status") == 404:
            return None
        raise


def setup_session_create(*, customer_id: str, success_url: str, cancel_url: str) -> str:
    """A Checkout session in setup mode: the org adds a payment method on Stripe's page."""
    params = {"mode": "setup", "customer": customer_id, "currency": "usd",
              "payment_method_types": ["card"], "success_url": success_url,
              "cancel_url": cancel_url}
    with _translated():
        session = _client().v1.checkout.sessions.create(params=params)
    return session.url


def webhook_event_verify(*, payload: bytes, signature_header: str) -> dict:
    """Check the `Stripe-Signature` header (HMAC-SHA256 of "t.payload", timestamp within the
    tolerance) and return the event as plain JSON."""
    secret = settings.STRIPE_WEBHOOK_SECRET
    if not secret:
        raise WebhookSignatureInvalid("Webhook secret is not configured.")
    try:
        stripe.WebhookSignature.verify_header(payload.decode(), signature_header, secret,
                                              tolerance=WEBHOOK_TOLERANCE_SECONDS)
        event = json.loads(payload)
    except (stripe.SignatureVerificationError, UnicodeDecodeError, ValueError) as exc:
        raise WebhookSignatureInvalid(f"Invalid webhook: {exc}") from exc
    if not isinstance(event, dict) or not event.get("id") or not event.get("type"):
        raise WebhookSignatureInvalid("The webhook payload is not a Stripe event.")
    return event
