"""The run page in a browser: its body as the page shows it, to compare live with a reload."""

from __future__ import annotations

import re

# What legitimately differs between two renderings of one page: the CSRF token, masked
# afresh for each response (and absent from what the socket renders: htmx sends the page's
# own, from <body hx-headers>); while the run goes on, the elapsed seconds the page ticks and
# the white space between elements (a message added live has none around it; none is shown);
# and the live line, which says the LLM call in flight as the socket reports it ("customer:
# waiting for the model's answer, 1 s"): a report kept by no row, which a reload's page
# shows from its own socket's next report ("Live…" until then).
_CSRF = re.compile(r'<input type="hidden" name="csrfmiddlewaretoken" value="[^"]*">')
_ELAPSED = re.compile(r'(class="elapsed">)\d+ s(<)')
_BETWEEN = re.compile(r">\s+<")
_LIVE_LINE = re.compile(r'(id="live-indicator" data-testid="live">)[^<]*(<)')


def run_body_html(page, *, running: bool = False) -> str:
    """The run page's body (``#run-page``: header, status, diagnosis, messages and their
    controls) as the browser holds it now, without its CSRF tokens (and, ``running``, its
    elapsed time and the white space between elements)."""
    html = _CSRF.sub("", page.locator("#run-page").evaluate("el => el.outerHTML"))
    if not running:
        return html
    html = _LIVE_LINE.sub(r"\1…\2", _ELAPSED.sub(r"\1… s\2", html))
    return _BETWEEN.sub("><", html)


def wait_until_ended_live(page) -> None:
    """Until the page, open while its run went on, shows the run ended: the final status
    came over the socket and the page's body as a reload shows it is in."""
    page.wait_for_function("() => window.tau2Run && window.tau2Run.ended !== null", timeout=90_000)
    page.evaluate("() => window.tau2Run.ended")
