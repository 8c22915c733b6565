"""Real Chromium (Debian's `chromium` package) driven by Playwright, against the live ASGI app.

Later page tests reuse these: `page` opens pages of `asgi_server` by relative URL
(``page.goto("/tasks/")``); `screenshot_on_failure` keeps a picture of a failed page
in test-results/.
"""

from __future__ import annotations

import os
import shutil

import pytest

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if not path:
        pytest.fail(
            "Debian's chromium is not installed (apt-get install chromium); "
            "`playwright install` cannot download browsers here"
        )
    return path


@pytest.fixture(scope="session", autouse=True)
def _server_before_browser(asgi_server):
    """Set up the database and the server before Playwright starts its event loop."""
    return asgi_server


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {
        **browser_type_launch_args,
        "executable_path": chromium_path(),
        "args": CHROMIUM_ARGS,
        "headless": True,
    }


@pytest.fixture(scope="session")
def base_url(asgi_server):
    return asgi_server.url


@pytest.fixture
def page(page, request):
    page.set_default_timeout(15_000)
    yield page
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        from pathlib import Path

        out = Path("test-results")
        out.mkdir(exist_ok=True)
        page.screenshot(path=str(out / f"{request.node.name}.png"), full_page=True)


def pytest_runtest_setup(item):
    # Playwright's sync API keeps an event loop running in the main thread from the
    # first browser test to the end of the session, and Django refuses ORM calls from
    # such a thread. Browser tests run last (tests/conftest.py orders them), so from
    # here on the main thread may use the database.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    setattr(item, f"rep_{report.when}", report)
