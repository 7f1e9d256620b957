"""Every gateway process has a usage spool of its own: `--workers N` sharing GATEWAY_SPOOL_PATH
would truncate each other's undelivered events."""

import subprocess
import sys

from gateway.spools import spool_claim


def claimed_by_another_process(base: str) -> str:
    code = f"from gateway.spools import spool_claim; print(spool_claim({base!r})[0])"
    return subprocess.run([sys.executable, "-c", code],  # noqa: S603 - our interpreter, our code
                          capture_output=True, text=True, check=True).stdout.strip()


def test_each_process_claims_a_spool_of_its_own_and_a_dead_ones_is_taken_over(tmp_path):
    base = str(tmp_path / "spool" / "usage.jsonl")
    first, first_lock = spool_claim(base)
    second, second_lock = spool_claim(base)
    assert (first, second) == (str(tmp_path / "spool" / "usage-0.jsonl"),
                               str(tmp_path / "spool" / "usage-1.jsonl"))
    # Another process cannot take either while they are held.
    assert claimed_by_another_process(base) == str(tmp_path / "spool" / "usage-2.jsonl")
    # The holder of usage-0 goes away: the next process takes it over (and replays it).
    first_lock.close()
    assert claimed_by_another_process(base) == first
    second_lock.close()
