"""Org A never sees org B's data, on every org-scoped route there is: each route of the portal
and the REST API whose path names an organization (its slug or its id) is asked by B's owner
for A, with every method that writes or reads, and answers 404 (or 405 where the method is not
served) with nothing written. The routes are read from the URLconf, so a route added without its
organization check fails here (tried: with the portal's membership check removed, 17 routes
fail). A route's other ids are filled with one that does not exist, so that its answer can only
be the organization's; the curated tests beside the views (tests/orgs/test_isolation.py,
tests/portal/test_org_pages.py and each app's own) ask for real objects of the other org."""

import re

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from rest_framework.test import APIClient

from orgs.models import AuditEvent

pytestmark = pytest.mark.django_db

# Path prefixes whose first parameter names the organization, and how it is filled.
ORG_PARAMETERS = {"<slug:slug>": lambda org: org.slug, "<int:org_id>": lambda org: str(org.pk)}
ORG_SCOPED = re.compile(r"^(portal/o/<slug:slug>/|api/v1/orgs/<int:org_id>/|"
                        r"api/v1/org/<slug:slug>/)")
OTHER_PARAMETER = re.compile(r"<(?:int|slug|str):\w+>")
NO_SUCH_ID = str(10**9)  # whatever a route's own object: the organization is checked first


def _routes(patterns=None, prefix: str = "") -> list[str]:
    found = []
    for pattern in get_resolver().url_patterns if patterns is None else patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            found += _routes(pattern.url_patterns, route)
        elif isinstance(pattern, URLPattern):
            found.append(route)
    return found


def org_scoped_routes() -> list[str]:
    return sorted({r for r in _routes() if ORG_SCOPED.match(r)})


def _path(route: str, org) -> str:
    for parameter, value in ORG_PARAMETERS.items():
        if route.startswith(parameter, route.index("<")):
            route = route.replace(parameter, value(org), 1)
            break
    return "/" + OTHER_PARAMETER.sub(NO_SUCH_ID, route)


def _client_of(side, route: str):
    """The API with DRF's authentication (no CSRF check to hide behind), pages signed in."""
    if route.startswith("api/"):
        client = APIClient()
        client.force_authenticate(side.owner)
        return client
    client = Client()
    client.force_login(side.owner)
    return client


def test_the_urlconf_has_the_org_scoped_routes_this_test_walks():
    routes = org_scoped_routes()
    assert len(routes) >= 50, routes
    for expected in ("portal/o/<slug:slug>/keys/", "api/v1/orgs/<int:org_id>/api-keys/",
                     "portal/o/<slug:slug>/webhooks/<int:endpoint_id>/",
                     "api/v1/orgs/<int:org_id>/billing/invoices/<int:invoice_id>/pdf",
                     "api/v1/org/<slug:slug>/waitlist"):
        assert expected in routes


@pytest.mark.parametrize("route", org_scoped_routes())
def test_another_orgs_owner_gets_404_on_every_org_scoped_route(two_orgs, route):
    a, b = two_orgs
    client, path = _client_of(b, route), _path(route, a.org)
    audited = AuditEvent.objects.count()
    body = {"name": "x", "email": "x@x.test", "role": "owner", "reason": "x"}
    statuses = [getattr(client, method)(path, body).status_code
                for method in ("get", "post", "put", "patch", "delete")]
    # 405 only for the method a route does not serve: the other one met the org check.
    assert set(statuses) <= {404, 405} and 404 in statuses, (path, statuses)
    assert AuditEvent.objects.count() == audited


@pytest.mark.parametrize("route", [r for r in org_scoped_routes()
                                   if not OTHER_PARAMETER.search(r[r.index(">") + 1:])])
def test_the_orgs_own_owner_reaches_the_same_routes(two_orgs, route):
    """The paths above are well made: the org's own owner reaches the routes that name
    nothing but the org (405 on a POST-only route, 400 where a GET needs query parameters)."""
    a, _ = two_orgs
    response = _client_of(a, route).get(_path(route, a.org))
    assert response.status_code in (200, 400, 405), (route, response.status_code)
