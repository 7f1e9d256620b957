from sluice.errors import Conflict, Unprocessable


def _limit(limit: str) -> tuple[str, dict]:
    """How a message names the capacity (output tokens/s unless said), and the detail saying
    it is input (prefill) capacity."""
    return ("", {}) if limit == "output" else ("input ", {"limit": limit})


class CapacityExhausted(Unprocessable):
    code = "capacity_exhausted"

    def __init__(self, *, pool, asked_tps: int, guaranteeable_tps: int, guaranteed_tps: int,
                 limit: str = "output"):
        free = max(guaranteeable_tps - guaranteed_tps, 0)
        what, detail = _limit(limit)
        super().__init__(
            f"Pool {pool} cannot guarantee {asked_tps} more {what}tokens/s: "
            f"{free} of {guaranteeable_tps} guaranteeable {what}tokens/s are free.",
            details={
                "pool": pool.pk,
                "asked_tps": asked_tps,
                "guaranteeable_tps": guaranteeable_tps,
                "guaranteed_tps": guaranteed_tps,
                "free_tps": free,
                **detail,
            },
        )


class CapacityBelowGuarantees(Unprocessable):
    code = "capacity_below_guarantees"

    def __init__(self, *, pool, new_guaranteeable_tps: int, guaranteed_tps: int,
                 limit: str = "output"):
        what, detail = _limit(limit)
        super().__init__(
            f"Pool {pool} has {guaranteed_tps} {what}tokens/s guaranteed; the new capacity "
            f"would allow only {new_guaranteeable_tps}. Reduce allocations by "
            f"{guaranteed_tps - new_guaranteeable_tps} {what}tokens/s first.",
            details={
                "pool": pool.pk,
                "guaranteed_tps": guaranteed_tps,
                "new_guaranteeable_tps": new_guaranteeable_tps,
                "excess_tps": guaranteed_tps - new_guaranteeable_tps,
                **detail,
            },
        )


def _free_details(free_tps: int, free_input_tps: int | None) -> dict:
    details = {"free_tps": free_tps}
    if free_input_tps is not None:
        details["free_input_tps"] = free_input_tps
    return details


class BookingNoRoom(Conflict):
    """The window has not the room asked for at some instant (or lost it to a booking or grant
    that committed first): `details` carry the window's free headroom."""

    code = "booking_no_room"

    def __init__(self, *, pool, starts_at, ends_at, asked_tps: int, asked_input_tps: int,
                 free_tps: int, free_input_tps: int | None):
        what = f"{asked_tps} tokens/s"
        if asked_input_tps:
            what += f" and {asked_input_tps} input tokens/s"
        super().__init__(
            f"Pool {pool} cannot guarantee {what} more over the whole window: at its busiest "
            f"instant {free_tps} tokens/s"
            + (f" and {free_input_tps} input tokens/s" if free_input_tps is not None else "")
            + " are free.",
            details={"pool": pool.pk, "starts_at": starts_at.isoformat(),
                     "ends_at": ends_at.isoformat(), "asked_tps": asked_tps,
                     "asked_input_tps": asked_input_tps,
                     **_free_details(free_tps, free_input_tps)})


class CapacityBelowBookings(Unprocessable):
    """A lower capacity would leave confirmed bookings without room: refused unless the
    operator names the bookings it breaks (they are cancelled with a full refund)."""

    code = "capacity_below_bookings"

    def __init__(self, *, pool, conflicts: list, excess_tps: int, excess_input_tps: int):
        ids = [b.pk for b in conflicts]
        super().__init__(
            f"Pool {pool} has bookings the new capacity cannot hold: up to {excess_tps} "
            f"tokens/s{f' and {excess_input_tps} input tokens/s' if excess_input_tps else ''} "
            f"too many at their busiest instant. Name the bookings to break ({len(ids)} "
            "conflict): they are cancelled with a full refund.",
            details={"pool": pool.pk, "conflicts": ids, "excess_tps": excess_tps,
                     "excess_input_tps": excess_input_tps})


class ChangeBreaksBookings(Unprocessable):
    """A change other than a capacity's (an allocation ended or shortened, an organization
    suspended or offboarded) would break confirmed bookings: refused unless the operator names
    every one of them (they are then cancelled with a full refund and a notice)."""

    def __init__(self, *, code: str, message: str, conflicts: list):
        ids = [b.pk for b in conflicts]
        super().__init__(
            f"{message} Name the bookings it breaks ({len(ids)}: "
            f"{', '.join(f'#{i}' for i in ids)}): they are cancelled with a full refund and "
            "their organization is told.",
            code=code, details={"conflicts": ids})
