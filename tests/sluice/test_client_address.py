"""The client's address behind trusted proxies, and the sign-in throttle that keys on it:
X-Forwarded-For only from SLUICE_TRUSTED_PROXIES, lockout per (account, address), and a slower
per-account brake that never locks out a browser which signed in before."""

import pytest
from django.test import Client

from sluice.client_address import client_address
from sluice.login_throttle import ACCOUNT_BRAKE_FAILURES, IP_MAX_FAILURES, MAX_FAILURES
from tests.factories import PASSWORD, OperatorFactory, UserFactory
from tests.test_deploy_settings import production_env, run, setting
from tests.totp import totp_code, totp_device_for

LB = "10.0.0.5"  # the load balancer
TRUSTED = ("10.0.0.0/24", "2001:db8:1::/48")


@pytest.mark.parametrize(("peer", "forwarded_for", "client"), [
    ("203.0.113.9", "198.51.100.1", "203.0.113.9"),            # untrusted peer: header ignored
    (LB, "198.51.100.1", "198.51.100.1"),                      # one trusted hop
    (LB, "6.6.6.6, 198.51.100.1", "198.51.100.1"),             # what the client wrote: unread
    (LB, "198.51.100.1, 10.0.0.7", "198.51.100.1"),            # two trusted hops
    (LB, "10.0.0.8, 10.0.0.7", "10.0.0.8"),                    # all trusted: the farthest
    (LB, "garbage, 10.0.0.7", "10.0.0.7"),                     # malformed: last trusted hop
    (LB, "", LB),
    (LB, "198.51.100.1:51234", "198.51.100.1"),                # with a port
    (LB, "[2001:db8:2::1]:443", "2001:db8:2::1"),
    ("2001:db8:1::5", "2001:db8:2::1", "2001:db8:2::1"),       # an IPv6 balancer
    ("10.0.1.5", "198.51.100.1", "10.0.1.5"),                  # just outside 10.0.0.0/24
    ("10.0.0.255", "198.51.100.1", "198.51.100.1"),            # its last address
])
def test_client_address(peer, forwarded_for, client):
    assert client_address(peer=peer, forwarded_for=forwarded_for, trusted=TRUSTED) == client


def test_nobody_is_trusted_by_default():
    assert client_address(peer=LB, forwarded_for="198.51.100.1", trusted=()) == LB


def test_the_setting_is_parsed_strictly():
    env = production_env(SLUICE_TRUSTED_PROXIES="10.0.0.0/24, 2001:db8:1::/48,192.0.2.7")
    assert setting("TRUSTED_PROXIES", env) == ("10.0.0.0/24", "2001:db8:1::/48", "192.0.2.7")
    assert setting("TRUSTED_PROXIES", production_env()) == ()
    for bad in ("10.0.0.1/24", "load-balancer", "10.0.0.0/33"):
        result = run(["-c", "import django; django.setup()"],
                     production_env(SLUICE_TRUSTED_PROXIES=bad))
        assert result.returncode != 0 and "SLUICE_TRUSTED_PROXIES" in result.stderr, bad


def _via(client_ip: str, *, peer: str = LB) -> Client:
    """A browser whose requests reach Sluice through `peer`, which forwards for `client_ip`."""
    return Client(REMOTE_ADDR=peer, HTTP_X_FORWARDED_FOR=client_ip)


def _sign_in(client, user, password=PASSWORD):
    return client.post("/portal/login/", {"username": user.username, "password": password})


LOCKED = "Too many failed sign-in attempts"


@pytest.fixture
def behind_lb(settings, redis_client):
    settings.TRUSTED_PROXIES = ("10.0.0.0/24",)


@pytest.mark.django_db
def test_behind_the_balancer_a_lockout_is_the_guessers_own(behind_lb):
    victim = UserFactory()
    attacker = _via("198.51.100.66")
    for _ in range(MAX_FAILURES - 1):
        _sign_in(attacker, victim, "wrong")
    assert _sign_in(attacker, victim).status_code == 302  # the 4th failure still lets in
    attacker = _via("198.51.100.66")
    for _ in range(MAX_FAILURES):
        _sign_in(attacker, victim, "wrong")
    assert LOCKED in _sign_in(attacker, victim).content.decode()
    # Everyone else comes through the same balancer and is not locked.
    assert _sign_in(_via("198.51.100.1"), victim).status_code == 302


@pytest.mark.django_db
def test_a_forged_header_neither_dodges_nor_frames(behind_lb):
    victim = UserFactory()
    # The attacker writes the victim's address; the balancer appends the attacker's.
    forging = Client(REMOTE_ADDR=LB, HTTP_X_FORWARDED_FOR="198.51.100.1, 198.51.100.66")
    for _ in range(MAX_FAILURES):
        _sign_in(forging, victim, "wrong")
    assert LOCKED in _sign_in(forging, victim).content.decode()
    assert _sign_in(_via("198.51.100.1"), victim).status_code == 302


@pytest.mark.django_db
def test_an_untrusted_peers_header_is_ignored(behind_lb):
    victim = UserFactory()
    for n in range(MAX_FAILURES):  # a new made-up address each time: still one peer
        _sign_in(_via(f"198.51.100.{n}", peer="203.0.113.9"), victim, "wrong")
    assert LOCKED in _sign_in(_via("198.51.100.200", peer="203.0.113.9"),
                              victim).content.decode()
    assert _sign_in(Client(REMOTE_ADDR="203.0.113.10"), victim).status_code == 302


@pytest.mark.django_db
def test_spraying_locks_the_sprayers_address_not_the_balancer(behind_lb):
    sprayer = _via("198.51.100.66")
    for n in range(IP_MAX_FAILURES):
        _sign_in(sprayer, UserFactory.build(username=f"guess{n}@x.test"), "Spring2026")
    someone = UserFactory()
    assert LOCKED in _sign_in(sprayer, someone).content.decode()
    assert _sign_in(_via("198.51.100.1"), someone).status_code == 302


def _guess_from_many(user, count: int) -> None:
    for n in range(count):
        _sign_in(_via(f"198.51.{n // 250}.{n % 250 + 1}"), user, "wrong")


@pytest.mark.django_db
def test_the_account_brake_stops_new_browsers_only(behind_lb):
    user = UserFactory()
    regular = _via("198.51.100.200")
    assert _sign_in(regular, user).status_code == 302  # this browser is known from now on
    regular.post("/portal/logout/")

    _guess_from_many(user, ACCOUNT_BRAKE_FAILURES - 1)
    assert _sign_in(_via("192.0.2.1"), user).status_code == 302  # below the brake
    _guess_from_many(user, 1)
    braked = _sign_in(_via("192.0.2.2"), user)
    assert braked.status_code == 200
    assert "or from a browser you signed in with before" in braked.content.decode()
    assert _sign_in(regular, user).status_code == 302


@pytest.mark.django_db
def test_nobody_on_the_internet_locks_an_operator_out(behind_lb):
    operator = OperatorFactory()
    device = totp_device_for(operator)
    console = _via("198.51.100.200")

    def console_sign_in(client):
        device.refresh_from_db()
        device.last_t = -1  # a code may be used once: let the test sign in twice in 30 s
        device.save()
        return client.post("/admin/login/", {"username": operator.username,
                                             "password": PASSWORD,
                                             "otp_token": totp_code(device)})

    assert console_sign_in(console).status_code == 302
    console.post("/admin/logout/")
    for n in range(ACCOUNT_BRAKE_FAILURES + 10):
        _via(f"198.51.{n // 250}.{n % 250 + 1}").post(
            "/admin/login/", {"username": operator.username, "password": "wrong",
                              "otp_token": "000000"})
    assert console_sign_in(_via("192.0.2.9")).status_code == 200  # a stranger's browser
    assert console_sign_in(console).status_code == 302
