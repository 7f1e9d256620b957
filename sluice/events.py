"""Events: how a lower app tells higher apps what happened, without importing them.

The house points one way (sluice <- orgs <- quotas <- metering <- rollout <- billing <- webhooks
<- portal, console; tests/test_architecture.py holds it). When a lower app's change needs a
higher app to act (an org is offboarded: quotas ends its allocations and republishes its
limits; an org is admitted: rollout marks its application and billing creates its Stripe
customer), the lower app declares an `Event` in its own `events.py` and emits it; the higher
app subscribes a receiver in its `AppConfig.ready()`.

Why this and not Django signals: an event is declared once, by the app that owns it, with the
payload it carries spelled out (receivers take keyword arguments and the payload is checked
against the declaration); receivers are plain functions held strongly and called in
subscription order; an exception in a receiver propagates to the emitter, so a receiver may
refuse a change (it raises a DomainError and the emitter's transaction rolls back) and nothing
fails silently; `Event.receivers` lists who listens, which tests read. Signals give senders,
weak references and `send_robust` - machinery for plugins we do not have.

Events are emitted inside the emitter's transaction. A receiver that writes (an outbox row, an
allocation ending) writes in that same transaction; one that talks to the outside world (Redis,
email, Stripe) defers with `transaction.on_commit`.
"""

from collections.abc import Callable


class Event:
    def __init__(self, name: str, *, payload: tuple[str, ...], doc: str = "") -> None:
        self.name = name
        self.payload = frozenset(payload)
        self.__doc__ = doc
        self.receivers: list[Callable[..., None]] = []

    def subscribe(self, receiver: Callable[..., None]) -> Callable[..., None]:
        """Add a receiver (idempotent: `ready()` may run more than once in tests)."""
        if receiver not in self.receivers:
            self.receivers.append(receiver)
        return receiver

    def emit(self, **payload) -> None:
        if set(payload) != self.payload:
            raise TypeError(f"{self.name} carries {sorted(self.payload)}, got {sorted(payload)}")
        for receiver in self.receivers:
            receiver(**payload)

    def __repr__(self) -> str:
        return f"<Event {self.name}: {len(self.receivers)} receivers>"
