import pytest
from django.core import mail

from orgs.models import ApiKey, AuditEvent, Invitation, Membership, OrgStatus, Role
from orgs.services import api_key_create
from sluice.secrets import secret_digest
from tests.factories import MembershipFactory, OrganizationFactory, UserFactory

pytestmark = pytest.mark.django_db


def test_operator_moves_an_org_through_its_lifecycle(operator_client):
    org = OrganizationFactory(status=OrgStatus.APPLIED)
    url = f"/api/v1/orgs/{org.pk}/transitions/"
    for action, expected in [("review_start", "in_review"), ("approve", "approved"),
                             ("admit", "active"), ("suspend", "suspended")]:
        response = operator_client.post(url, {"action": action, "reason": "r"}, format="json")
        assert response.status_code == 200, response.json()
        assert response.json()["status"] == expected
    assert response.json()["allowed_actions"] == ["restore", "offboard"]


def test_illegal_transition_is_409_and_changes_nothing(operator_client):
    org = OrganizationFactory(status=OrgStatus.APPLIED)
    response = operator_client.post(f"/api/v1/orgs/{org.pk}/transitions/",
                                    {"action": "suspend"}, format="json")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "illegal_transition"
    assert "applied" in response.json()["error"]["message"]
    org.refresh_from_db()
    assert org.status == OrgStatus.APPLIED
    assert not AuditEvent.objects.exists()


def test_unknown_action_is_400(operator_client):
    org = OrganizationFactory()
    response = operator_client.post(f"/api/v1/orgs/{org.pk}/transitions/", {"action": "nuke"},
                                    format="json")
    assert response.status_code == 400
    assert "action" in response.json()["error"]["fields"]


def test_members_cannot_transition_their_own_org(two_orgs):
    a, _ = two_orgs
    response = a.client.post(f"/api/v1/orgs/{a.org.pk}/transitions/", {"action": "suspend"},
                             format="json")
    assert response.status_code == 403


def test_api_key_secret_is_shown_once_and_stored_hashed(two_orgs):
    a, _ = two_orgs
    response = a.client.post(f"/api/v1/orgs/{a.org.pk}/api-keys/", {"name": "prod"},
                             format="json")
    assert response.status_code == 201
    secret = response.json()["secret"]
    assert secret.startswith("sk_")
    key = ApiKey.objects.get(pk=response.json()["id"])
    assert key.digest == secret_digest(secret)
    assert secret not in str(ApiKey.objects.filter(pk=key.pk).values().first())
    listing = a.client.get(f"/api/v1/orgs/{a.org.pk}/api-keys/").json()
    assert "secret" not in listing["results"][0]
    assert listing["results"][0]["prefix"] == f"sk_{key.lookup}"


def test_only_active_orgs_create_keys(operator):
    org = OrganizationFactory(status=OrgStatus.SUSPENDED)
    owner = UserFactory()
    MembershipFactory(org=org, user=owner, role=Role.OWNER)
    from rest_framework.test import APIClient
    client = APIClient()
    client.force_authenticate(owner)
    response = client.post(f"/api/v1/orgs/{org.pk}/api-keys/", {"name": "x"}, format="json")
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "org_not_active"
    assert not ApiKey.objects.exists()


def test_suspension_keeps_keys(operator_client, two_orgs):
    a, _ = two_orgs
    key, _secret = api_key_create(org=a.org, name="k", actor=a.owner)
    operator_client.post(f"/api/v1/orgs/{a.org.pk}/transitions/", {"action": "suspend"},
                         format="json")
    key.refresh_from_db()
    assert key.revoked_at is None  # disabled by the org's status, not deleted or revoked


def test_viewer_cannot_create_keys_or_manage_members(two_orgs):
    a, _ = two_orgs
    viewer = UserFactory()
    MembershipFactory(org=a.org, user=viewer, role=Role.VIEWER)
    from rest_framework.test import APIClient
    client = APIClient()
    client.force_authenticate(viewer)
    assert client.post(f"/api/v1/orgs/{a.org.pk}/api-keys/", {"name": "x"},
                       format="json").status_code == 403
    assert client.post(f"/api/v1/orgs/{a.org.pk}/invitations/",
                       {"email": "x@y.z", "role": "viewer"}, format="json").status_code == 403
    assert client.get(f"/api/v1/orgs/{a.org.pk}/members/").status_code == 200


def test_invitation_is_emailed_after_commit_and_token_not_stored(two_orgs,
                                                                 django_capture_on_commit_callbacks):
    a, _ = two_orgs
    with django_capture_on_commit_callbacks(execute=True):
        response = a.client.post(f"/api/v1/orgs/{a.org.pk}/invitations/",
                                 {"email": "New@Example.com", "role": "developer"},
                                 format="json")
    assert response.status_code == 201
    assert "token" not in response.json()
    assert len(mail.outbox) == 1
    invitation = Invitation.objects.get()
    assert invitation.email == "new@example.com"
    assert invitation.token_digest in [secret_digest(w.rstrip("/").split("/")[-1])
                                       for w in mail.outbox[0].body.split() if "/invitations/" in w]


def test_last_owner_cannot_be_removed_or_demoted(two_orgs):
    a, _ = two_orgs
    membership = Membership.objects.get(org=a.org, user=a.owner)
    url = f"/api/v1/orgs/{a.org.pk}/members/{membership.pk}/"
    assert a.client.patch(url, {"role": "viewer"}, format="json").json()["error"]["code"] == \
        "last_owner"
    assert a.client.delete(url).status_code == 409
    assert Membership.objects.filter(pk=membership.pk, role=Role.OWNER).exists()


def test_org_list_is_scoped_and_query_count_is_flat(two_orgs, django_assert_num_queries):
    a, b = two_orgs
    for _ in range(5):
        MembershipFactory(user=a.owner, org=OrganizationFactory())
    with django_assert_num_queries(2):  # count + page
        body = a.client.get("/api/v1/orgs/").json()
    assert body["count"] == 6
    assert b.org.pk not in [o["id"] for o in body["results"]]


def _invite(client, org, email="dev@example.com", role="developer") -> int:
    response = client.post(f"/api/v1/orgs/{org.pk}/invitations/", {"email": email,
                                                                     "role": role},
                           format="json")
    assert response.status_code == 201
    return response.json()["id"]


def _emailed_token(message) -> str:
    link = next(w for w in message.body.split() if "/invitations/" in w)
    return link.rstrip("/").split("/")[-1]


def test_invitation_accept_joins_once(two_orgs, django_capture_on_commit_callbacks):
    a, _ = two_orgs
    with django_capture_on_commit_callbacks(execute=True):
        _invite(a.client, a.org)
    token = _emailed_token(mail.outbox[0])
    newcomer = UserFactory(email="dev@example.com")
    from rest_framework.test import APIClient
    client = APIClient()
    client.force_authenticate(newcomer)
    response = client.post("/api/v1/invitations/accept/", {"token": token}, format="json")
    assert response.status_code == 201
    assert response.json()["role"] == "developer"
    again = client.post("/api/v1/invitations/accept/", {"token": token}, format="json")
    assert again.status_code == 404
    assert again.json()["error"]["code"] == "invitation_invalid"
    forged = client.post("/api/v1/invitations/accept/", {"token": token[:-3] + "abc"},
                         format="json")
    assert forged.status_code == 404
    assert Membership.objects.filter(org=a.org, user=newcomer).count() == 1


def test_expired_or_revoked_invitation_cannot_be_used(two_orgs,
                                                      django_capture_on_commit_callbacks):
    from django.utils import timezone
    a, _ = two_orgs
    with django_capture_on_commit_callbacks(execute=True):
        invitation_id = _invite(a.client, a.org)
    with django_capture_on_commit_callbacks(execute=True):
        _invite(a.client, a.org, email="late@example.com")
    token, token2 = (_emailed_token(m) for m in mail.outbox)
    revoke = a.client.post(f"/api/v1/orgs/{a.org.pk}/invitations/{invitation_id}/revoke/")
    assert revoke.json()["revoked_at"]
    Invitation.objects.filter(email="late@example.com").update(expires_at=timezone.now())
    from rest_framework.test import APIClient
    client = APIClient()
    client.force_authenticate(UserFactory())
    for t in (token, token2):
        response = client.post("/api/v1/invitations/accept/", {"token": t}, format="json")
        assert response.status_code == 404


def test_decisions_on_an_org_with_an_open_application_go_through_the_application(
        operator_client):
    from tests.waitlist import applicant_org, submit

    org, owner = applicant_org("Queued")
    application = submit(org, owner)
    url = f"/api/v1/orgs/{org.pk}/transitions/"
    for action in ("review_start", "reject"):
        response = operator_client.post(url, {"action": action}, format="json")
        assert response.status_code == 409
        error = response.json()["error"]
        assert (error["code"], error["details"]["application"]) == ("application_open",
                                                                    application.pk)
    org.refresh_from_db()
    assert org.status == OrgStatus.APPLIED
    assert operator_client.post(url, {"action": "offboard"}, format="json").status_code == 409
