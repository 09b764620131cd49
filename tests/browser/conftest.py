"""A real headless browser for the report's tests: Debian's chromium-headless-shell driven by
Playwright (``make test`` installs both). Without them these tests fail; they never skip."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# Where the screenshots go: docs/img/ when asked (GRADEBOX_SCREENSHOTS=docs/img, to refresh
# the docs' pictures), else a folder of this run's own: a test run leaves the checkout alone.
DOCS_IMG = Path(
    os.environ.get("GRADEBOX_SCREENSHOTS")
    or Path(tempfile.gettempdir()) / f"report-screenshots-{os.getpid()}"
).resolve()
DOCS_IMG.mkdir(parents=True, exist_ok=True)


def chromium_path() -> str:
    """The browser binary itself (``/usr/bin/chromium-headless-shell`` is a wrapper script):
    $GRADEBOX_CHROMIUM, else where the Debian package put it."""
    if os.environ.get("GRADEBOX_CHROMIUM"):
        return os.environ["GRADEBOX_CHROMIUM"]
    listed = subprocess.run(
        ["dpkg", "-L", "chromium-headless-shell"], capture_output=True, text=True, check=False
    ).stdout.split()
    found = [p for p in listed if p.endswith("/chromium-headless-shell") and "/lib/" in p]
    assert found, "chromium-headless-shell is not installed: `make test` installs it (apt)"
    return found[0]


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium_path())
        yield b
        b.close()


class Watched:
    """A page with everything it did that a report must never do, recorded."""

    def __init__(self, page: object, allowed: tuple[str, ...]) -> None:
        self.page = page
        self.dialogs: list[str] = []
        self.requests: list[str] = []
        self.errors: list[str] = []
        page.on("dialog", self._dialog)
        page.on("request", self._request)
        page.on("console", self._console)
        page.on("pageerror", lambda e: self.errors.append(f"pageerror: {e}"))
        self.allowed = allowed
        # Playwright's init scripts run outside the page's CSP: they only listen.
        page.add_init_script(
            "window.__csp = []; document.addEventListener('securitypolicyviolation',"
            " (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));"
        )

    def _dialog(self, dialog: object) -> None:
        self.dialogs.append(dialog.message)
        dialog.dismiss()

    def _request(self, request: object) -> None:
        # blob: is the regex search's worker, which the page's own script makes.
        if not request.url.startswith((*self.allowed, "blob:")):
            self.requests.append(request.url[:200])

    def _console(self, msg: object) -> None:
        if msg.type in ("error", "warning"):
            self.errors.append(f"console {msg.type}: {msg.text[:300]}")

    def csp_violations(self) -> list[str]:
        return self.page.evaluate("window.__csp")

    def assert_clean(self) -> None:
        assert self.dialogs == [], self.dialogs
        assert self.requests == [], self.requests
        assert self.errors == [], self.errors
        assert self.csp_violations() == []


@pytest.fixture
def open_page(browser: object) -> Iterator[object]:
    """``open_page(url, allowed_prefixes, dark=False)`` -> a ``Watched`` page."""
    contexts = []

    def opener(url: str, allowed: tuple[str, ...], dark: bool = False, **context: Any) -> Watched:
        # ``context``: Playwright's context options over the desktop defaults (a phone's).
        ctx = browser.new_context(**{
            "viewport": {"width": 1280, "height": 860},
            "color_scheme": "dark" if dark else "light",
            **context,
        })  # fmt: skip
        contexts.append(ctx)
        watched = Watched(ctx.new_page(), allowed)
        watched.page.goto(url)
        watched.page.wait_for_selector("#h-tests")
        return watched

    yield opener
    for ctx in contexts:
        ctx.close()
