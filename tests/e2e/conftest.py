"""Browser journeys: Playwright's sync API driving Debian's chromium (never a downloaded
browser) against pytest-django's live_server, in the same process as the test."""

import os
from pathlib import Path

import pytest

# Playwright's sync API runs an event loop in the test thread; Django refuses ORM calls from a
# thread with a running loop unless told the calls are deliberate. Here they are: factories and
# assertions run between browser steps, never concurrently with them.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

from playwright.sync_api import sync_playwright  # noqa: E402

CHROMIUM = "/usr/bin/chromium"  # Debian's package; never a browser Playwright downloads
WIDE, PHONE = 1366, 390  # every main page is looked at on a laptop and on a phone
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
SCREENSHOTS = Path(__file__).resolve().parents[2] / "artifacts" / "screenshots"


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no chromium at {CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def site(live_server, settings, redis_client):
    """The live server, with links in emails pointing at it."""
    settings.PUBLIC_URL = live_server.url
    return live_server.url


@pytest.fixture
def new_page(browser, site):
    """Opens a page in a fresh browser context (its own cookies: one per person)."""
    contexts = []

    def open_page():
        context = browser.new_context(base_url=site, viewport={"width": WIDE, "height": 900})
        context.set_default_timeout(10_000)
        contexts.append(context)
        return context.new_page()

    yield open_page
    for context in contexts:
        context.close()


def screenshot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def main_page(page, name: str) -> None:
    """A main page, checked as people meet it: saved at 1366 px and 390 px wide
    (<name>-1366.png, <name>-390.png), nothing wider than the phone's screen, and no serious or
    critical accessibility violation (axe-core) at either width. Leaves the page at 1366 px."""
    height = page.viewport_size["height"]
    for width in (WIDE, PHONE):
        page.set_viewport_size({"width": width, "height": height})
        page.wait_for_load_state()
        page.wait_for_timeout(150)  # charts redraw at the new width (ResizeObserver)
        screenshot(page, f"{name}-{width}")
        overflow = page.evaluate("document.documentElement.scrollWidth")
        assert overflow <= width, f"{name} is {overflow} px wide at {width} px"
        assert_accessible(page, name)
    page.set_viewport_size({"width": WIDE, "height": height})


AXE = Path(__file__).resolve().parent / "vendor" / "axe-core-4.14.1" / "axe.min.js"


def assert_accessible(page, name: str) -> None:
    """axe-core (vendored from npm, injected here, never served by the site): no violation of
    serious or critical impact, WCAG 2.1 A/AA and best practices."""
    if not page.evaluate("typeof window.axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    violations = page.evaluate("""async () => {
        const result = await axe.run(document, {resultTypes: ["violations"]});
        return result.violations.filter(v => ["serious", "critical"].includes(v.impact))
          .map(v => ({id: v.id, impact: v.impact, help: v.help,
                      nodes: v.nodes.slice(0, 3).map(n => n.target.join(" "))}));
    }""")
    assert violations == [], f"{name}: {violations}"
