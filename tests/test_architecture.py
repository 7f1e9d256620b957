"""The house points one way, read from the code (every import, module top or inside a function):

    sluice (kernel) <- orgs <- quotas <- admission <- metering <- rollout <- billing
        <- webhooks <- portal, console <- config

A lower app never imports a higher one; it emits an event (sluice/events.py) that the higher app
subscribes to. The admission engine (quotas/limiter) imports nothing of Django or of the apps,
so a Django-free data plane can use it on its own; so does the admission queue's
(admission/engine), built on it."""

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RANK = {"sluice": 0, "orgs": 1, "quotas": 2, "admission": 3, "metering": 4, "rollout": 5,
        "billing": 6, "webhooks": 7, "portal": 8, "console": 8, "config": 9}
ENGINE = ("quotas", "limiter")
QUEUE_ENGINE = ("admission", "engine")  # Django-free too: the engine's and its own imports
# What the engine may import besides the standard library and itself.
ENGINE_THIRD_PARTY = {"redis", "hiredis"}
ENGINE_KERNEL = {"sluice.secrets"}  # Django-free: the one SHA-256 digest of secrets


def _modules(root: Path = ROOT) -> list[Path]:
    return sorted(p for app in RANK for p in (root / app).rglob("*.py")
                  if "migrations" not in p.parts)


def _imports(path: Path, root: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the module's package
                package = path.relative_to(root).parent.parts
                base = package[:len(package) - node.level + 1]
                found.append((node.lineno, ".".join([*base, node.module or ""]).strip(".")))
            elif node.module:
                found.append((node.lineno, node.module))
    return found


def _violations(root: Path = ROOT) -> list[str]:
    stdlib = sys.stdlib_module_names
    broken = []
    for path in _modules(root):
        rel = path.relative_to(root)
        src = rel.parts[0]
        in_engine = rel.parts[:2] in (ENGINE, QUEUE_ENGINE)
        for line, name in _imports(path, root):
            top = name.split(".")[0]
            if in_engine:
                own = tuple(name.split(".")[:2]) in (ENGINE, rel.parts[:2])
                if not (own or top in stdlib or top in ENGINE_THIRD_PARTY
                        or name in ENGINE_KERNEL):
                    broken.append(f"{rel}:{line} the engine imports {name}")
                continue
            if top in RANK and top != src and RANK[top] >= RANK[src]:
                broken.append(f"{rel}:{line} {src} -> {top} ({name})")
    return broken


def test_every_import_points_down_the_house():
    assert _violations() == []


def test_the_checker_sees_what_it_must(tmp_path):
    """Late imports, relative imports and the engine's rule, on a tree made for the test."""
    (tmp_path / "orgs").mkdir()
    (tmp_path / "orgs" / "late.py").write_text("def f():\n    from billing.models import X\n")
    (tmp_path / "quotas" / "limiter").mkdir(parents=True)
    (tmp_path / "quotas" / "limiter" / "engine.py").write_text(
        "import redis\nfrom . import clock\nfrom django.conf import settings\n"
        "from ..models import Pool\n")
    (tmp_path / "quotas" / "services.py").write_text("from orgs.models import Organization\n")
    assert _violations(tmp_path) == [
        "orgs/late.py:2 orgs -> billing (billing.models)",
        "quotas/limiter/engine.py:3 the engine imports django.conf",
        "quotas/limiter/engine.py:4 the engine imports quotas.models",
    ]


@pytest.mark.parametrize("app", sorted(RANK))
def test_every_app_is_checked(app):
    assert any(p.relative_to(ROOT).parts[0] == app for p in _modules())


def _django_apps(root: Path = ROOT) -> list[str]:
    return sorted(p.parent.name for p in root.glob("*/apps.py"))


def test_the_house_knows_every_django_app():
    """A new app gets its place in the house before it gets code."""
    assert set(_django_apps()) <= set(RANK)


# No app holds more than this share of the apps' code: past it, an app is doing several jobs.
LARGEST_SHARE = 0.30


def _code_lines(app: str, root: Path = ROOT) -> int:
    """Non-blank lines of Python and Lua, migrations left out (tests live outside the apps)."""
    return sum(sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
               for path in (root / app).rglob("*")
               if path.suffix in (".py", ".lua") and "migrations" not in path.parts)


def test_no_app_holds_more_than_its_share_of_the_code():
    lines = {app: _code_lines(app) for app in _django_apps()}
    total = sum(lines.values())
    over = {app: f"{n / total:.1%}" for app, n in lines.items() if n > LARGEST_SHARE * total}
    assert over == {}


def test_the_gateway_has_no_django_inside():
    """gateway/ is the data plane: it talks to Sluice through the hook (sluice_client), never
    through Django or Sluice's apps."""
    broken = [f"{path.relative_to(ROOT)}:{line} imports {name}"
              for path in sorted((ROOT / "gateway").rglob("*.py"))
              for line, name in _imports(path, ROOT)
              if name.split(".")[0] in {"django", "rest_framework", "celery", *RANK}]
    assert broken == []
