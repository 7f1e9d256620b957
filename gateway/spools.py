"""A usage spool of its own for every gateway process.

`--workers N` (or N containers sharing a volume) must not share one spool file: a process that
has delivered its batch truncates the file it took it from, and would drop another process's
events appended in between. Each process claims the first of `<base>-0.jsonl`,
`<base>-1.jsonl`, ... whose lock no live process holds (`flock`, released by the kernel when the
holder dies), so a restarted process takes over, and replays, what a dead one left behind.
"""

import fcntl
import os
from typing import IO


def spool_claim(base: str) -> tuple[str, IO]:
    """The spool path this process owns, and the open lock file that holds it (keep it open
    for the life of the process)."""
    root, ext = os.path.splitext(base)
    os.makedirs(os.path.dirname(os.path.abspath(base)), exist_ok=True)
    n = 0
    while True:
        path = f"{root}-{n}{ext or '.jsonl'}"
        lock = open(path + ".lock", "a")  # noqa: SIM115 - held open for the process's life
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            n += 1
            continue
        return path, lock
