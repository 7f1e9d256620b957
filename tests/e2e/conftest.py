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
        context = browser.new_context(base_url=site, viewport={"width": 1280, "height": 900})
        context.set_default_timeout(10_000)
        contexts.append(context)
        return context.new_page()

    yield open_page
    for context in contexts:
        context.close()


def screenshot(page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
