from sluice.errors import Unprocessable


class CapacityExhausted(Unprocessable):
    code = "capacity_exhausted"

    def __init__(self, *, pool, asked_tps: int, guaranteeable_tps: int, guaranteed_tps: int):
        free = max(guaranteeable_tps - guaranteed_tps, 0)
        super().__init__(
            f"Pool {pool} cannot guarantee {asked_tps} more tokens/s: "
            f"{free} of {guaranteeable_tps} guaranteeable tokens/s are free.",
            details={
                "pool": pool.pk,
                "asked_tps": asked_tps,
                "guaranteeable_tps": guaranteeable_tps,
                "guaranteed_tps": guaranteed_tps,
                "free_tps": free,
            },
        )


class CapacityBelowGuarantees(Unprocessable):
    code = "capacity_below_guarantees"

    def __init__(self, *, pool, new_guaranteeable_tps: int, guaranteed_tps: int):
        super().__init__(
            f"Pool {pool} has {guaranteed_tps} tokens/s guaranteed; the new capacity would "
            f"allow only {new_guaranteeable_tps}. Reduce allocations by "
            f"{guaranteed_tps - new_guaranteeable_tps} tokens/s first.",
            details={
                "pool": pool.pk,
                "guaranteed_tps": guaranteed_tps,
                "new_guaranteeable_tps": new_guaranteeable_tps,
                "excess_tps": guaranteed_tps - new_guaranteeable_tps,
            },
        )
