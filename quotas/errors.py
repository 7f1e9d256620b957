from sluice.errors import Unprocessable


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
