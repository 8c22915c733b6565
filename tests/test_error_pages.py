"""The site's 404 and 500 pages: its own, styled by its stylesheet, under its one strict
Content-Security-Policy (DEBUG off); with DEBUG on Django's technical pages, which may
use their inline styles, that response alone.

charlie is anonymous; alice is signed in.
"""

from __future__ import annotations

import re

import pytest
from django.test import Client, RequestFactory, override_settings
from django.urls import path
from django.views.defaults import server_error

STYLESHEET = 'href="/static/css/app.css"'


def style_src(response) -> str:
    return re.search(r"style-src ([^;]*)", response["Content-Security-Policy"]).group(1)


@pytest.mark.django_db
def test_an_address_that_matches_nothing_is_the_sites_own_404_page():
    response = Client().get("/no/such/page/")
    page = response.content.decode()
    assert response.status_code == 404
    assert 'data-testid="not-found"' in page and STYLESHEET in page
    assert '<code data-testid="not-found-path">/no/such/page/</code>' in page
    assert 'href="/tasks/"' in page  # the header and a way on
    assert "<style" not in page and "<script>" not in page
    assert style_src(response) == "'self'"


def test_a_run_that_is_not_there_is_the_same_404_page(alice_client):
    response = alice_client.get("/runs/999999999/")
    page = response.content.decode()
    assert response.status_code == 404
    assert 'data-testid="not-found"' in page and STYLESHEET in page
    assert 'data-testid="username"' in page  # the header knows alice
    assert style_src(response) == "'self'"


def test_the_500_page_needs_no_database_and_no_request_context():
    # No database mark: a query here would raise (the database may be what failed).
    response = server_error(RequestFactory().get("/runs/1/"))
    page = response.content.decode()
    assert response.status_code == 500
    assert 'data-testid="server-error"' in page and STYLESHEET in page
    assert "<style" not in page and "<script" not in page
    assert "Something went wrong" in page


def _broken(request):
    raise RuntimeError("scripted failure")


urlpatterns = [path("broken/", _broken)]  # this module is the URLconf of the next test


@pytest.mark.django_db
@override_settings(ROOT_URLCONF=__name__)
def test_a_view_that_fails_answers_the_500_page_under_the_strict_policy():
    response = Client(raise_request_exception=False).get("/broken/")
    assert response.status_code == 500
    assert 'data-testid="server-error"' in response.content.decode()
    assert style_src(response) == "'self'"


@pytest.mark.django_db
@override_settings(DEBUG=True)
def test_with_debug_on_djangos_404_page_may_use_its_inline_styles_and_nothing_else():
    response = Client().get("/no/such/page/")
    assert response.status_code == 404
    assert "<style" in response.content.decode()  # Django's technical page
    assert style_src(response) == "'self' 'unsafe-inline'"
    policy = response["Content-Security-Policy"]
    assert "script-src 'self';" in policy
    # Every other page keeps the strict policy.
    assert style_src(Client().get("/tasks/")) == "'self'"
