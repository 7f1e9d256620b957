"""A local Stripe-compatible server (localstripe plus what it lacks), for development and tests.

Not part of the service: production talks to api.stripe.com. `dev.py run` starts it when
STRIPE_API_KEY is not set; the billing tests start their own (tests/billing/conftest.py).
"""
