"""Who counts as an operator. A module of its own, importing nothing of the app, because both
the selectors and the services ask (and the selectors import the services' audit types)."""


def user_is_operator(user) -> bool:
    """Active staff; when signed in through a browser session, also past the second factor.

    OTPMiddleware gives a session's user `is_verified()`: a staff password alone (say, typed
    into the portal's sign-in) must not open the operator API that the console guards with
    TOTP. Users from operator bearer tokens carry no such method: the token is the credential."""
    if not (user and user.is_authenticated and user.is_staff and user.is_active):
        return False
    is_verified = getattr(user, "is_verified", None)
    return is_verified is None or bool(is_verified())
