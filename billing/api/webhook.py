"""POST /api/billing/stripe/webhook: Stripe calls this, so no session, no CSRF, no DRF auth;
the signature is the authentication. Bad or stale signature: 400 and nothing stored."""

from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt

from billing import services, stripe_api
from sluice.error_responses import require_post_json
from sluice.errors import error_body


@csrf_exempt
@require_post_json
def stripe_webhook(request):
    try:
        event = stripe_api.webhook_event_verify(
            payload=request.body, signature_header=request.headers.get("Stripe-Signature", ""))
    except stripe_api.WebhookSignatureInvalid as exc:
        return JsonResponse(error_body(code=exc.code, message=exc.message), status=400)
    stored, created = services.stripe_event_record(event=event)
    return JsonResponse({"received": True, "duplicate": not created, "status": stored.status})
