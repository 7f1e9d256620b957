import pytest

from orgs.models import ApiKey, Invitation, Membership, OrgStatus, Role
from orgs.services import api_key_create, invitation_create
from tests.factories import AllocationFactory, MembershipFactory, UserFactory
from tests.portal.conftest import portal_client, verified

pytestmark = pytest.mark.django_db


@pytest.fixture
def a_objects(orgs):
    """One of each org-scoped object in org A."""
    a, _ = orgs
    key, _ = api_key_create(org=a.org, name="prod", actor=a.owner)
    member = MembershipFactory(org=a.org, role=Role.DEVELOPER)
    invitation, _ = invitation_create(org=a.org, email="new@alpha.test", role=Role.VIEWER,
                                      actor=a.owner)
    return {"key": key.pk, "member": member.pk, "invitation": invitation.pk}


ORG_PAGES = [
    ("get", "/portal/o/{slug}/"),
    ("post", "/portal/o/{slug}/application/"),
    ("get", "/portal/o/{slug}/members/"),
    ("post", "/portal/o/{slug}/members/invite/"),
    ("post", "/portal/o/{slug}/members/{member}/role/"),
    ("post", "/portal/o/{slug}/members/{member}/remove/"),
    ("post", "/portal/o/{slug}/invitations/{invitation}/revoke/"),
    ("get", "/portal/o/{slug}/keys/"),
    ("post", "/portal/o/{slug}/keys/new/"),
    ("post", "/portal/o/{slug}/keys/{key}/revoke/"),
    ("get", "/portal/o/{slug}/quotas/"),
    ("get", "/portal/switch/?org={slug}"),
]


@pytest.mark.parametrize(("method", "url"), ORG_PAGES)
def test_other_org_gets_404_on_every_org_page(orgs, a_objects, method, url):
    a, b = orgs
    response = getattr(b.client, method)(url.format(slug=a.org.slug, **a_objects),
                                         {"role": "owner", "name": "x", "email": "x@x.test"})
    assert response.status_code == 404


@pytest.mark.parametrize(("method", "url"), [p for p in ORG_PAGES if "{key}" in p[1]
                                             or "{member}" in p[1] or "{invitation}" in p[1]])
def test_other_orgs_objects_are_404_under_ones_own_slug(orgs, a_objects, method, url):
    a, b = orgs
    response = getattr(b.client, method)(url.format(slug=b.org.slug, **a_objects),
                                         {"role": "owner"})
    assert response.status_code == 404
    assert ApiKey.objects.get(pk=a_objects["key"]).revoked_at is None
    assert Membership.objects.get(pk=a_objects["member"]).role == Role.DEVELOPER
    assert Invitation.objects.get(pk=a_objects["invitation"]).revoked_at is None


def test_viewer_sees_no_member_management_and_cannot_use_it(orgs, viewer, a_objects):
    a, _ = orgs
    client = portal_client(viewer)
    status_page = client.get(f"/portal/o/{a.org.slug}/").content.decode()
    assert "Members" not in status_page
    assert client.get(f"/portal/o/{a.org.slug}/members/").status_code == 403
    response = client.post(f"/portal/o/{a.org.slug}/members/{a_objects['member']}/remove/")
    assert response.status_code == 403
    assert Membership.objects.filter(pk=a_objects["member"]).exists()
    keys_page = client.get(f"/portal/o/{a.org.slug}/keys/").content.decode()
    assert "Create a key" not in keys_page and "Revoke" not in keys_page
    assert client.post(f"/portal/o/{a.org.slug}/keys/new/", {"name": "x"}).status_code == 403


def test_owner_creates_a_key_and_sees_the_secret_once(orgs):
    a, _ = orgs
    response = a.client.post(f"/portal/o/{a.org.slug}/keys/new/", {"name": "voice prod"},
                             HTTP_HX_REQUEST="true")
    assert response.status_code == 201
    key = ApiKey.objects.get(org=a.org, name="voice prod")
    secret = response.context["secret"]
    assert secret.startswith(f"sk_{key.lookup}_") and secret in response.content.decode()
    assert secret not in a.client.get(f"/portal/o/{a.org.slug}/keys/").content.decode()


def test_key_creation_needs_a_verified_email(orgs):
    a, _ = orgs
    developer = UserFactory()
    MembershipFactory(org=a.org, user=developer, role=Role.DEVELOPER)
    response = portal_client(developer).post(f"/portal/o/{a.org.slug}/keys/new/", {"name": "x"})
    assert response.status_code == 403
    assert "Confirm your email address" in response.content.decode()
    assert not ApiKey.objects.filter(org=a.org, name="x").exists()


def test_inactive_org_cannot_create_keys_and_is_told_why(orgs):
    a, _ = orgs
    a.org.status = OrgStatus.APPROVED
    a.org.save()
    response = a.client.post(f"/portal/o/{a.org.slug}/keys/new/", {"name": "x"})
    assert response.status_code == 409
    assert "Only active organizations can create API keys" in response.content.decode()


def test_htmx_revoke_swaps_the_row(orgs, a_objects):
    a, _ = orgs
    response = a.client.post(f"/portal/o/{a.org.slug}/keys/{a_objects['key']}/revoke/",
                             HTTP_HX_REQUEST="true")
    page = response.content.decode()
    assert page.lstrip().startswith("<tr") and "Revoked" in page
    again = a.client.post(f"/portal/o/{a.org.slug}/keys/{a_objects['key']}/revoke/",
                          HTTP_HX_REQUEST="true")
    assert "already revoked" in again.content.decode()


def test_owner_invites_changes_role_and_cannot_remove_the_last_owner(orgs, a_objects):
    a, _ = orgs
    slug = a.org.slug
    a.client.post(f"/portal/o/{slug}/members/invite/", {"email": "z@alpha.test",
                                                        "role": "billing"})
    assert Invitation.objects.filter(org=a.org, email="z@alpha.test", role="billing").exists()
    a.client.post(f"/portal/o/{slug}/members/{a_objects['member']}/role/", {"role": "admin"})
    assert Membership.objects.get(pk=a_objects["member"]).role == Role.ADMIN
    owner = Membership.objects.get(org=a.org, user=a.owner)
    response = a.client.post(f"/portal/o/{slug}/members/{owner.pk}/role/", {"role": "viewer"},
                             follow=True)
    assert "An organization must keep at least one owner." in response.content.decode()
    assert Membership.objects.get(pk=owner.pk).role == Role.OWNER


def test_bad_invite_input_is_a_400_and_writes_nothing(orgs):
    a, _ = orgs
    response = a.client.post(f"/portal/o/{a.org.slug}/members/invite/",
                             {"email": "not-an-email", "role": "emperor"})
    assert response.status_code == 400
    assert not Invitation.objects.filter(org=a.org).exists()


def test_quotas_page_shows_allocations_per_pool(orgs):
    a, b = orgs
    AllocationFactory(org=a.org, guaranteed_tps=750, burst_tps=1500)
    AllocationFactory(org=b.org, guaranteed_tps=333, burst_tps=333)
    page = a.client.get(f"/portal/o/{a.org.slug}/quotas/").content.decode()
    assert 'data-field="guaranteed_tps">750' in page and "333" not in page


def test_switcher_lists_every_org_of_the_user(orgs):
    a, b = orgs
    MembershipFactory(org=b.org, user=a.owner, role=Role.VIEWER)
    page = a.client.get(f"/portal/o/{a.org.slug}/").content.decode()
    assert f'value="{b.org.slug}"' in page
    response = a.client.get(f"/portal/switch/?org={b.org.slug}")
    assert response["Location"] == f"/portal/o/{b.org.slug}/"
    a.client.get(response["Location"])
    assert a.client.get("/portal/")["Location"] == f"/portal/o/{b.org.slug}/"


@pytest.mark.parametrize("rows", [1, 8])
def test_list_pages_use_a_constant_number_of_queries(orgs, django_assert_num_queries, rows):
    a, _ = orgs
    for i in range(rows):
        api_key_create(org=a.org, name=f"k{i}", actor=a.owner)
        MembershipFactory(org=a.org, user=verified(UserFactory()), role=Role.DEVELOPER)
        invitation_create(org=a.org, email=f"p{i}@alpha.test", role=Role.VIEWER, actor=a.owner)
        AllocationFactory(org=a.org)
    slug = a.org.slug
    a.client.get(f"/portal/o/{slug}/")  # the first visit remembers the org in the session
    # Session, user, membership, the switcher's memberships, then the page's own reads:
    # members + invitations, verified email + keys, allocations + today's use + the bookings in
    # force; status: the
    # latest application, the pool preference (waitlist), verified email.
    for url, expected in [(f"/portal/o/{slug}/members/", 6), (f"/portal/o/{slug}/keys/", 6),
                          (f"/portal/o/{slug}/quotas/", 7), (f"/portal/o/{slug}/", 7)]:
        with django_assert_num_queries(expected):
            assert a.client.get(url).status_code == 200
