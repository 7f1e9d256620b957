"""Portal pages before admission show what happens next; answers show beside the form they
answer; support can confirm an address by hand."""

import pytest
from django.core.management import call_command

from billing.models import BillingAccount, StripeEvent
from billing.selectors import payment_method_added_at
from orgs.models import Membership, OrgStatus
from portal.models import VerifiedEmail

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("page", ["quotas/", "usage/", "quota-requests/"])
def test_pages_before_admission_say_what_happens_next(orgs, page):
    a, _ = orgs
    a.org.status = OrgStatus.APPROVED
    a.org.save()
    body = a.client.get(f"/portal/o/{a.org.slug}/{page}").content.decode()
    assert "data-not-admitted" in body and "is not admitted yet" in body
    assert "data-chart-spec" not in body and "quota-requests/new/" not in body


def test_the_last_owner_is_told_on_the_members_page(orgs):
    a, _ = orgs
    me = Membership.objects.get(org=a.org, user=a.owner)
    response = a.client.post(f"/portal/o/{a.org.slug}/members/{me.pk}/remove/", follow=True)
    assert response.redirect_chain[-1][0] == f"/portal/o/{a.org.slug}/members/#members"
    body = response.content.decode()
    members = body.split('id="members"')[1].split("</section>")[0]
    assert "alert-error" in members and "owner" in members
    assert Membership.objects.filter(pk=me.pk).exists()


def test_support_confirms_an_address_by_hand(orgs, capsys):
    a, _ = orgs
    VerifiedEmail.objects.filter(user=a.owner).delete()
    call_command("email_verified_mark", a.owner.email.upper())
    call_command("email_verified_mark", a.owner.email)
    assert VerifiedEmail.objects.filter(user=a.owner, email=a.owner.email).count() == 1
    assert capsys.readouterr().out.splitlines() == [f"{a.owner.email} is now confirmed.",
                                                    f"{a.owner.email} was already confirmed."]


def test_payment_method_on_file_follows_the_checkout_webhook(orgs):
    a, b = orgs
    BillingAccount.objects.create(org=a.org, stripe_customer_id="cus_a")
    assert payment_method_added_at(org=a.org) is None
    StripeEvent.objects.create(event_id="evt_1", type="checkout.session.completed", payload={
        "data": {"object": {"customer": "cus_a", "mode": "setup", "status": "complete"}}})
    assert payment_method_added_at(org=a.org) is not None
    assert payment_method_added_at(org=b.org) is None
    page = a.client.get(f"/portal/o/{a.org.slug}/billing/").content.decode()
    assert 'data-payment-method="on-file"' in page
