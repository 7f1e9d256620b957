"""What no model could have produced: a usage event that claims more output tokens than its
pool's models could decode in the time the event says the request took is refused on its own,
`implausible_usage` (docs/hook.md, "Plausible usage"). Timings feed the speed premium and output
tokens the bill: a gateway's bug or a forged report must not become either.

The bound is on the request's whole duration, started_at to finished_at, not on first token to
finish: a whole (non-streamed) answer arrives at once, and an upstream may buffer a stream, so
every token may reach the gateway in one instant. What a request lasted bounds what was made.

    output_tokens <= OUTPUT_BURST_TOKENS + ceiling x (finished_at - started_at) in seconds
    ceiling = max(SPEED_CEILING_FACTOR x the pool's speed floor, SPEED_CEILING_MIN_TPS)

The ceiling is far above what any served model decodes per request (a few thousand tokens/s
at the very fastest); the burst absorbs coarse clocks and a short answer timed as instant.
A fast-tier event passes the TTFT ceiling only if it started less than that ceiling before its
first token, so the tokens the premium can be claimed on stay bounded by the pool's ceiling
over that time plus the decode time.
"""

from quotas.hook.inputs import UsageInput
from quotas.hook.routing import PoolRoute

SPEED_CEILING_FACTOR = 20
SPEED_CEILING_MIN_TPS = 5_000
OUTPUT_BURST_TOKENS = 1_024


def output_tps_ceiling(route: PoolRoute) -> int:
    """The most output tokens/s one request of this pool is believed to reach."""
    return max(SPEED_CEILING_FACTOR * route.speed_floor_output_tps, SPEED_CEILING_MIN_TPS)


def usage_implausible(event: UsageInput, route: PoolRoute) -> str | None:
    """Why no model of this pool could have produced the event, or None when one could."""
    seconds = (event.finished_at - event.started_at).total_seconds()
    ceiling = output_tps_ceiling(route)
    if event.output_tokens <= OUTPUT_BURST_TOKENS + ceiling * seconds:
        return None
    return (f"{event.output_tokens:,} output tokens in {seconds:g} s (started_at to "
            f"finished_at): this pool's models produce at most {OUTPUT_BURST_TOKENS:,} + "
            f"{ceiling:,} tokens/s. Report the request's real timestamps.")
