"""The admission engine (quotas/limiter) stands on its own: no Django, no Sluice app, so a
Django-free gateway can import it. Checked twice: every import in its source (functions
included), and a process that uses it against the real Redis with Django never loaded."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

from django.conf import settings

from quotas.limiter import connection

LIMITER = Path(connection.__file__).parent
ROOT = LIMITER.parent.parent
THIRD_PARTY = {"redis", "hiredis"}
# Django-free kernel modules the engine shares with the apps (one SHA-256 digest of secrets).
KERNEL = {"sluice.secrets"}


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: relative import"
            names.add(node.module)
    return names


def test_the_engine_imports_only_the_standard_library_redis_and_itself():
    for path in LIMITER.glob("*.py"):
        for name in _imports(path):
            top = name.split(".")[0]
            assert (top in sys.stdlib_module_names or top in THIRD_PARTY or name in KERNEL
                    or name.startswith("quotas.limiter.")), f"{path.name} imports {name}"


USE_WITHOUT_DJANGO = """
import asyncio, json, sys
from datetime import timedelta

from quotas.limiter.clock import clock
from quotas.limiter.connection import EngineConfig, engine_configure
from quotas.limiter.engine import limiter_authorize, limiter_settle
from quotas.limiter.schema import Settlement
from quotas.limiter.state import (ApiKeyState, OrgState, PoolState, limiter_org_publish,
                                  limiter_pool_synced_mark)
from sluice.secrets import secret_digest

engine_configure(EngineConfig(redis_url=sys.argv[1]))
org = OrgState(org_id=7, status="active", suspension_reason="", has_allocation=True,
               guaranteed_tps=100, burst_tps=0, daily_tokens=10_000, max_concurrency=2,
               spend_cap_micros=0, day_used_tokens=0, month_spend_micros=0,
               api_keys=[ApiKeyState(key_id=3, digest=secret_digest("sk_pure"), expires_ms=0)])
limiter_org_publish(pool_id=1, org=org, now=clock.now(),
                    pool=PoolState(headroom_tps=0, estimate_default=4096, estimate_floor=64))
limiter_pool_synced_mark(pool_id=1)
decision = asyncio.run(limiter_authorize(pool_id=1, api_key="sk_pure", request_id="r1",
                                         input_tokens=30, max_output_tokens=70))
settled = limiter_settle(pool_id=1, settlements=[Settlement("r1", 7, 40)])
after = asyncio.run(limiter_authorize(pool_id=1, api_key="sk_pure", request_id="r2",
                                      input_tokens=1, max_output_tokens=1))
print(json.dumps({
    "decision": [decision.outcome, decision.org_id, decision.api_key_id,
                 decision.reserved_tokens],
    "settled": settled,
    "after": [after.outcome, after.day_remaining, after.requests_remaining],
    "modules": sorted(m for m in sys.modules if m.split(".")[0] in (
        "django", "rest_framework", "celery", "config", "orgs", "billing", "portal",
        "console") or (m.startswith("sluice.") and m != "sluice.secrets")
        or (m.startswith("quotas.") and not m.startswith("quotas.limiter"))),
}))
"""


def test_authorize_and_settle_run_in_a_process_without_django(redis_client):
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(  # noqa: S603 - our own interpreter and code
        [sys.executable, "-c", USE_WITHOUT_DJANGO, settings.REDIS_URL],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["modules"] == []
    assert result["decision"] == ["allowed", 7, 3, 100]
    assert result["settled"] == 1
    # r1 used 40 of its 100 tokens and freed its slot: 10,000 - 40 - 2 left, 1 of 2 slots.
    assert result["after"] == ["allowed", 10_000 - 40 - 2, 1]
