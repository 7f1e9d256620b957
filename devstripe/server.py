"""A local Stripe-compatible server: localstripe plus what it lacks.

    python -m devstripe.server --port 8420 --data-dir /tmp/x

Started by `dev.py run` when STRIPE_API_KEY is not set, and by the billing tests
(tests/billing/conftest.py). It listens on 127.0.0.1 only.

localstripe (PyPI) implements customers, invoice items and invoices, but not: one-off draft
invoices (it insists on pending items or a subscription), invoice items attached to a given
draft invoice, finalizing an invoice, voiding one that has no payment intent, Checkout
sessions (with their hosted page), or idempotency keys. This module adds exactly those, in the
same process, before localstripe's routes are registered. Production code is unchanged: it
speaks HTTP to this server through STRIPE_API_BASE.

The Checkout page (GET /checkout/<session id>, the session's `url`) is a small stand-in for
Stripe's hosted one, setup mode only: it takes a test card (prefilled with 4242 4242 4242
4242), attaches it to the customer as its default payment method, completes the session,
sends `checkout.session.completed` to the registered webhooks, and returns the browser to the
session's success_url. Cancel returns it to cancel_url.

Endpoints for tests (under /_config/, beside localstripe's own, no API key needed):
- POST /_config/faults {"lose_responses": N}: the next N idempotent POSTs are executed (and
  their result recorded under the key) but answered 500, like a response lost on the wire;
- GET /_config/stats: how many POSTs were executed and how many were replayed from a key;
- DELETE /_config/reset: empty the store, the idempotency records and the counters.
State (localstripe's store and the idempotency records) lives in --data-dir, so the server
can be stopped and started again without forgetting what it did.
"""

import argparse
import hashlib
import html
import json
import pickle
import time
from pathlib import Path

from aiohttp import web
from localstripe import resources
from localstripe.errors import UserError
from localstripe.resources import (
    Customer,
    Event,
    Invoice,
    InvoiceItem,
    InvoiceLineItem,
    PaymentMethod,
    StripeObject,
    store,
)
from localstripe.webhooks import schedule_webhook

DATA_DIR = Path(".")
IDEMPOTENCY: dict[str, dict] = {}
STATS = {"executed": 0, "replayed": 0, "lost_responses": 0}
FAULTS = {"lose_responses": 0}


def _store_path() -> Path:
    return DATA_DIR / "store.pickle"


def _idempotency_path() -> Path:
    return DATA_DIR / "idempotency.json"


def _store_load() -> None:
    if _store_path().exists():
        store.update(pickle.loads(_store_path().read_bytes()))  # noqa: S301 - our own file
    if _idempotency_path().exists():
        IDEMPOTENCY.update(json.loads(_idempotency_path().read_text()))


def _store_dump() -> None:
    _store_path().write_bytes(pickle.dumps(dict(store), protocol=pickle.HIGHEST_PROTOCOL))


# localstripe writes its whole store to /tmp/localstripe.pickle on every change; keep ours
# in the data dir instead so parallel runs do not share state.
resources.Store.dump_to_disk = lambda self: _store_dump()
resources.Store.try_load_from_disk = lambda self: _store_load()


class CheckoutSession(StripeObject):
    object = "checkout.session"
    _id_prefix = "cs_test_"

    def __init__(self, mode=None, customer=None, success_url=None, cancel_url=None,
                 currency=None, payment_method_types=None, **kwargs):
        if mode != "setup" or not customer or not success_url or not cancel_url:
            raise UserError(400, "Only setup-mode sessions for a customer are supported")
        resources.Customer._api_retrieve(customer)
        super().__init__()
        self.mode, self.customer, self.currency = mode, customer, currency
        self.success_url, self.cancel_url, self.status = success_url, cancel_url, "open"
        self.url = f"{PUBLIC_BASE}/checkout/{self.id}"


PUBLIC_BASE = "http://127.0.0.1"
_invoice_create_original = Invoice._api_create.__func__


def _invoice_create(cls, customer=None, collection_method=None, auto_advance=None,
                    currency=None, pending_invoice_items_behavior=None, description=None,
                    metadata=None, **kwargs):
    """One-off draft invoices: with pending_invoice_items_behavior=exclude, start empty."""
    if pending_invoice_items_behavior != "exclude":
        return _invoice_create_original(cls, customer=customer, description=description,
                                        metadata=metadata, **kwargs)
    invoice = Invoice(customer=customer, description=description, metadata=metadata)
    invoice.currency = currency or "usd"
    invoice.collection_method = collection_method or "charge_automatically"
    return invoice


def _invoice_item_create(cls, invoice=None, **data):
    """An item created for a given draft invoice becomes one of its lines at once."""
    if invoice is not None:
        target = Invoice._api_retrieve(invoice)
        if target.status != "draft":
            raise UserError(400, "You can only add invoice items to a draft invoice")
    item = InvoiceItem(invoice=invoice, **data)
    if invoice is not None:
        target.lines._list.append(InvoiceLineItem(item))
    return item


def _invoice_finalize(id, **kwargs):
    invoice = Invoice._api_retrieve(id)
    if invoice.status != "draft":
        raise UserError(400, "This invoice is already finalized")
    invoice._draft = False
    invoice.status_transitions["finalized_at"] = int(time.time())
    return invoice


def _invoice_void(id, **kwargs):
    invoice = Invoice._api_retrieve(id)
    if invoice.status not in ("draft", "open"):
        raise UserError(400, "You can only void a draft or open invoice")
    invoice._draft, invoice._voided = False, True
    invoice.status_transitions["voided_at"] = int(time.time())
    return invoice


Invoice._api_create = classmethod(_invoice_create)
InvoiceItem._api_create = classmethod(_invoice_item_create)
resources.extra_apis[:] = [
    entry for entry in resources.extra_apis if entry[1] != "/v1/invoices/{id}/void"
] + [
    ("POST", "/v1/invoices/{id}/finalize", _invoice_finalize),
    ("POST", "/v1/invoices/{id}/void", _invoice_void),
    ("POST", "/v1/checkout/sessions", lambda **data: CheckoutSession(**data)),
]

from localstripe.server import app  # noqa: E402 - after the patches above, which it reads


def _fingerprint(request: web.Request, body: bytes) -> str:
    return hashlib.sha256(request.method.encode() + request.path.encode() + body).hexdigest()


@web.middleware
async def idempotency_middleware(request: web.Request, handler):
    """Stripe's idempotency: the same key and request replay the first answer; the same key
    with a different request is an error."""
    key = request.headers.get("Idempotency-Key")
    if request.method != "POST" or not key or not request.path.startswith("/v1/"):
        return await handler(request)
    body = await request.read()
    scoped = f"{request.headers.get('Authorization', '')}:{key}"
    seen = IDEMPOTENCY.get(scoped)
    if seen is not None:
        if seen["fingerprint"] != _fingerprint(request, body):
            return web.json_response({"error": {
                "type": "idempotency_error",
                "message": "Keys for idempotent requests can only be used with the same "
                           "parameters they were first used with."}}, status=400)
        STATS["replayed"] += 1
        return web.Response(body=seen["body"].encode(), status=seen["status"],
                            content_type="application/json",
                            headers={"Idempotent-Replayed": "true"})
    response = await handler(request)
    STATS["executed"] += 1
    if 400 <= response.status < 500:
        # Like Stripe: a request refused before it executed saves no result under its key.
        return response
    IDEMPOTENCY[scoped] = {"fingerprint": _fingerprint(request, body),
                           "status": response.status, "body": response.text}
    _idempotency_path().write_text(json.dumps(IDEMPOTENCY))
    if FAULTS["lose_responses"] > 0:
        FAULTS["lose_responses"] -= 1
        STATS["lost_responses"] += 1
        return web.json_response({"error": {"type": "api_error",
                                            "message": "response lost (injected)"}},
                                 status=500)
    return response


async def faults_set(request: web.Request):
    FAULTS.update(await request.json())
    return web.json_response(FAULTS)


async def stats_get(request: web.Request):
    return web.json_response(STATS)


async def reset(request: web.Request):
    store.clear()
    IDEMPOTENCY.clear()
    _idempotency_path().unlink(missing_ok=True)
    FAULTS["lose_responses"] = 0
    STATS.update(executed=0, replayed=0, lost_responses=0)
    return web.json_response({"ok": True})


CHECKOUT_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Add a payment method · Stripe (local)</title>
<style>
  body {{ font: 16px/1.5 system-ui, sans-serif; background: #f6f9fc; color: #1a1f36; margin: 0; }}
  main {{ max-width: 26rem; margin: 3rem auto; background: #fff; border-radius: 8px;
         padding: 1.5rem 2rem; box-shadow: 0 2px 8px rgba(0,0,0,.12); }}
  h1 {{ font-size: 1.3rem; }} .note {{ color: #4f566b; font-size: .9rem; }}
  label {{ display: block; font-weight: 600; margin: .8rem 0 .2rem; }}
  input {{ width: 100%; box-sizing: border-box; font: inherit; padding: .5rem;
          border: 1px solid #8792a2; border-radius: 6px; }}
  .row {{ display: flex; gap: .75rem; }} .row > div {{ flex: 1; }}
  button {{ margin-top: 1.25rem; width: 100%; font: inherit; font-weight: 600; padding: .6rem;
           border: 0; border-radius: 6px; background: #4b3fc4; color: #fff; cursor: pointer; }}
  .error {{ color: #a4161a; font-weight: 600; }} a {{ color: #4b3fc4; }}
</style></head>
<body><main>
<p class="note">Stripe Checkout · local test server</p>
<h1>Save a card for {customer}</h1>
<p class="note">Setup mode: nothing is charged now. Invoices are charged to this card later.
Test card: 4242 4242 4242 4242; 4000 0000 0000 0002 is declined.</p>
{error}
<form method="post">
  <label for="number">Card number</label>
  <input id="number" name="number" inputmode="numeric" autocomplete="cc-number"
         value="4242 4242 4242 4242">
  <div class="row"><div><label for="expiry">Expiry (MM/YY)</label>
    <input id="expiry" name="expiry" value="12/34" autocomplete="cc-exp"></div>
  <div><label for="cvc">CVC</label><input id="cvc" name="cvc" value="123"
    autocomplete="cc-csc"></div></div>
  <button type="submit">Save card</button>
</form>
<p><a href="{cancel_url}">Cancel and go back</a></p>
</main></body></html>
"""


def _checkout_session(request: web.Request) -> CheckoutSession:
    session = store.get(f"{CheckoutSession.object}:{request.match_info['session_id']}")
    if session is None or session.status != "open":
        raise web.HTTPNotFound(text="No open Checkout session with this id.")
    return session


def _checkout_render(session: CheckoutSession, error: str = "", status: int = 200):
    customer = Customer._api_retrieve(session.customer)
    page = CHECKOUT_PAGE.format(
        customer=html.escape(customer.name or customer.email or customer.id),
        cancel_url=html.escape(session.cancel_url, quote=True),
        error=f'<p class="error" role="alert">{html.escape(error)}</p>' if error else "")
    return web.Response(text=page, content_type="text/html", status=status)


async def checkout_page(request: web.Request):
    return _checkout_render(_checkout_session(request))


async def checkout_complete(request: web.Request):
    """Save the card on the customer, complete the session, tell the webhooks, go back."""
    session = _checkout_session(request)
    form = await request.post()
    month, _, year = str(form.get("expiry", "")).partition("/")
    try:
        method = PaymentMethod(type="card", card={
            "number": "".join(str(form.get("number", "")).split()),
            "exp_month": month.strip(), "exp_year": year.strip(),
            "cvc": str(form.get("cvc", "")).strip()})
        PaymentMethod._api_attach(method.id, customer=session.customer)
    except UserError as error:
        message = (error.body or {}).get("error", {}).get("message", "") or "Invalid card."
        return _checkout_render(session, f"{message} Check the card details.", status=402)
    Customer._api_update(session.customer,
                         invoice_settings={"default_payment_method": method.id})
    session.status, session.payment_method = "complete", method.id
    schedule_webhook(Event("checkout.session.completed", session))
    _store_dump()
    raise web.HTTPSeeOther(session.success_url)


@web.middleware
async def checkout_middleware(request: web.Request, handler):
    """The Checkout page is Stripe's hosted page: a browser opens it, with no API key, so it
    skips localstripe's key check (which would answer 401)."""
    if request.path.startswith("/checkout/"):
        return await request.match_info.handler(request)
    return await handler(request)


# Outermost, so localstripe's error middleware answers are recorded under the key too.
app.middlewares.insert(0, idempotency_middleware)
app.middlewares.insert(0, checkout_middleware)
app.router.add_post("/_config/faults", faults_set)
app.router.add_get("/_config/stats", stats_get)
app.router.add_delete("/_config/reset", reset)
app.router.add_get("/checkout/{session_id}", checkout_page)
app.router.add_post("/checkout/{session_id}", checkout_complete)


def main() -> None:
    global DATA_DIR, PUBLIC_BASE
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--data-dir", required=True)
    args = parser.parse_args()
    DATA_DIR = Path(args.data_dir)
    DATA_DIR.mkdir(parents=True, exist_ok=True)
    PUBLIC_BASE = f"http://127.0.0.1:{args.port}"
    _store_load()
    web.run_app(app, host="127.0.0.1", port=args.port, access_log=None,
                print=lambda *a: print(*a, flush=True))


if __name__ == "__main__":
    main()
