"""Browser tests: a Playwright page signed in as a person, through Django's own session."""

from __future__ import annotations

from tests.support.people import signed_in


def page_signed_in_as(page, user, base_url: str):
    """``page`` with ``user``'s session cookie for ``base_url``; returns the page."""
    session = signed_in(user).cookies["sessionid"].value
    page.context.add_cookies([{"name": "sessionid", "value": session, "url": base_url}])
    return page
