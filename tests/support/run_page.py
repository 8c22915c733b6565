"""The run page in a browser: its body as the page shows it, to compare live with a reload."""

from __future__ import annotations

import re

# What legitimately differs between two renderings of one page: the CSRF token is masked
# afresh for each response.
_CSRF = re.compile(r'(name="csrfmiddlewaretoken" value=")[^"]*(")')


def run_body_html(page) -> str:
    """The run page's body (``#run-page``: header, status, diagnosis, messages and their
    controls) as the browser holds it now, with the CSRF tokens blanked."""
    html = page.locator("#run-page").evaluate("el => el.outerHTML")
    return _CSRF.sub(r"\1\2", html)


def wait_until_ended_live(page) -> None:
    """Until the page, open while its run went on, shows the run ended: the final status
    came over the socket and the page's body as a reload shows it is in."""
    page.wait_for_function("() => window.tau2Run && window.tau2Run.ended !== null", timeout=90_000)
    page.evaluate("() => window.tau2Run.ended")
