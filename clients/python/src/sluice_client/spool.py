"""A durable on-disk queue of usage events (JSON lines) that could not be delivered.

Appends are flushed and fsynced before `append` returns. Replay takes the whole file by
renaming it (atomic), so events appended meanwhile go to a new file; whatever a replay fails to
deliver is appended back. A crash mid-replay leaves the renamed file, picked up next time:
events may be sent twice, which Sluice acknowledges as duplicates.
"""

import json
import os
import threading
from pathlib import Path


class Spool:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.taking = self.path.with_name(self.path.name + ".replaying")
        self.dead = self.path.with_name(self.path.name + ".dead")
        self._lock = threading.Lock()

    def append(self, events: list[dict], *, dead: bool = False) -> None:
        if not events:
            return
        target = self.dead if dead else self.path
        data = "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in events)
        with self._lock, open(target, "a", encoding="utf-8") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    def take(self) -> list[dict]:
        """Everything spooled so far (including a replay a crash interrupted)."""
        with self._lock:
            if not self.taking.exists():
                if not self.path.exists():
                    return []
                os.replace(self.path, self.taking)
            lines = self.taking.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines if line.strip()]

    def taken(self) -> None:
        """The events of the last `take` are delivered or re-appended: forget them."""
        with self._lock:
            self.taking.unlink(missing_ok=True)

    def __len__(self) -> int:
        count = 0
        for p in (self.taking, self.path):
            if p.exists():
                count += sum(1 for line in p.read_text(encoding="utf-8").splitlines() if line)
        return count
