"""What charlie (anonymous), alice (signed in) and reviewer (staff) may see and do,
and that every form refuses a POST without its CSRF token."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.core.management import CommandError, call_command
from django.http import HttpResponse
from django.test import Client, RequestFactory

from apps.accounts.access import can_start, can_view_runs, signin_required_to_start
from apps.tasks.models import Task

pytestmark = pytest.mark.django_db
User = get_user_model()


@pytest.fixture
def public_pages(catalogue):
    task = Task.objects.filter(domain_id="airline").order_by("task_id").first()
    return [
        "/tasks/",
        "/tasks/?domain=retail&split=base&q=lamp",
        "/tasks/airline/",
        f"/tasks/airline/{task.task_id}/",
        "/api/domains/",
        "/api/domains/airline/",
        "/api/tasks/?domain=airline",
        f"/api/tasks/airline/{task.task_id}/",
        "/api/schema/",
        "/api/docs/",
        "/accounts/sign-in/",
        "/accounts/sign-in/?reason=start&next=/tasks/",
    ]


def test_charlie_anonymous_browses_every_public_page(client, public_pages):
    for path in public_pages:
        assert client.get(path).status_code == 200, path
    page = client.get("/tasks/").content.decode()
    assert "Sign in with Hugging Face" in page
    assert 'data-testid="username"' not in page


def test_alice_signed_in_browses_the_same_pages_with_her_name(alice_client, public_pages):
    for path in public_pages:
        response = alice_client.get(path)
        assert response.status_code == 200, path
    page = alice_client.get("/tasks/").content.decode()
    assert ">alice</span>" in page
    assert "cdn-avatars.huggingface.co/alice.png" in page
    assert 'href="/admin/"' not in page  # not staff


def test_reviewer_staff_sees_the_same_pages_and_the_admin(reviewer_client, public_pages):
    for path in public_pages:
        assert reviewer_client.get(path).status_code == 200, path
    assert 'href="/admin/"' in reviewer_client.get("/tasks/").content.decode()
    assert reviewer_client.get("/admin/").status_code == 200
    assert reviewer_client.get("/admin/accounts/hfcredential/").status_code == 200


def test_charlie_is_sent_to_sign_in_from_the_admin(client):
    response = client.get("/admin/", follow=True)
    assert response.redirect_chain[-1][0].startswith("/accounts/sign-in/?")
    assert "The admin is for staff" in response.content.decode()


def test_alice_not_staff_is_told_the_admin_is_not_for_her(alice_client):
    response = alice_client.get("/admin/", follow=True)
    assert response.request["PATH_INFO"] == "/accounts/sign-in/"
    assert "alice is not staff" in response.content.decode()
    assert alice_client.get("/admin/accounts/hfcredential/").status_code == 302


def test_the_admin_shows_credential_metadata_only_and_no_edit(reviewer_client, alice):
    from apps.accounts.models import HFCredential

    credential = HFCredential.objects.get(user=alice)
    page = reviewer_client.get(f"/admin/accounts/hfcredential/{credential.pk}/change/")
    text = page.content.decode()
    assert "inference-api" in text
    assert "access_token_enc" not in text and credential.access_token_enc not in text
    assert reviewer_client.get("/admin/accounts/hfcredential/add/").status_code == 403


def test_grant_staff_needs_a_prior_sign_in_and_can_be_revoked(alice):
    with pytest.raises(CommandError, match="Nobody has signed in as 'zoe'"):
        call_command("grant_staff", "zoe")
    call_command("grant_staff", "ALICE")  # HF usernames match without regard to case
    alice.refresh_from_db()
    assert alice.is_staff and alice.is_superuser
    call_command("grant_staff", "alice", "--revoke")
    alice.refresh_from_db()
    assert not alice.is_staff and not alice.is_superuser


def test_runs_are_for_signed_in_people_unless_public(settings, alice):
    assert settings.TAU2_PUBLIC_RUNS is False
    assert can_view_runs(alice) and not can_view_runs(AnonymousUser())
    settings.TAU2_PUBLIC_RUNS = True
    assert can_view_runs(AnonymousUser())
    assert not can_start(AnonymousUser())  # public runs are still read-only
    assert can_start(alice)
    alice.is_active = False
    assert not can_start(alice)


def test_starting_sends_charlie_to_a_sign_in_page_that_says_why(alice):
    @signin_required_to_start
    def start_run(request):
        return HttpResponse("started")

    request = RequestFactory().post("/runs/new/?task=3")
    request.user = AnonymousUser()
    response = start_run(request)
    assert response.status_code == 302
    assert (
        response["Location"] == "/accounts/sign-in/?next=%2Fruns%2Fnew%2F%3Ftask%3D3&reason=start"
    )
    page = Client().get(response["Location"]).content.decode()  # charlie's browser
    assert "runs on your own Hugging Face credits (a Hugging Face sign-in)" in page
    assert 'name="next" value="/runs/new/?task=3"' in page

    request.user = alice
    assert start_run(request).content == b"started"


def test_the_sign_in_page_ignores_a_next_url_on_another_site(client):
    page = client.get("/accounts/sign-in/?next=https://evil.example/").content.decode()
    assert "evil.example" not in page


def test_developer_sign_in_is_refused_unless_debug_and_the_setting(client, settings):
    assert client.post("/accounts/dev-login/", {"name": "eve"}).status_code == 404
    settings.TAU2_DEV_LOGIN = True  # DEBUG still off: production
    assert client.post("/accounts/dev-login/", {"name": "eve"}).status_code == 404
    settings.DEBUG, settings.TAU2_DEV_LOGIN = True, False
    assert client.post("/accounts/dev-login/", {"name": "eve"}).status_code == 404
    assert "Developer sign-in" not in client.get("/accounts/sign-in/").content.decode()
    assert not User.objects.filter(username="dev-eve").exists()


def test_developer_sign_in_works_on_a_laptop(client, settings):
    settings.DEBUG, settings.TAU2_DEV_LOGIN = True, True
    assert "Developer sign-in" in client.get("/accounts/sign-in/").content.decode()
    response = client.post("/accounts/dev-login/", {"name": "eve", "next": "/tasks/airline/"})
    assert response["Location"] == "/tasks/airline/"
    page = client.get("/tasks/").content.decode()
    assert ">dev-eve</span>" in page
    assert "without Hugging Face" in page


def _csrf_client(from_client: Client | None = None) -> Client:
    browser = Client(enforce_csrf_checks=True)
    if from_client is not None:
        browser.cookies = from_client.cookies
    return browser


def _token(browser: Client) -> str:
    browser.get("/accounts/sign-in/")
    return browser.cookies["csrftoken"].value


def test_the_sign_in_form_needs_its_csrf_token(fake_hf):
    browser = _csrf_client()
    assert browser.post("/auth/login/huggingface/").status_code == 403
    ok = browser.post("/auth/login/huggingface/", {"csrfmiddlewaretoken": _token(browser)})
    assert ok.status_code == 302 and ok["Location"].startswith(fake_hf.url)


def test_the_sign_out_form_needs_its_csrf_token(alice_client):
    browser = _csrf_client(alice_client)
    assert browser.post("/accounts/sign-out/").status_code == 403
    assert browser.get("/tasks/").context["user"].is_authenticated
    browser.post("/accounts/sign-out/", {"csrfmiddlewaretoken": _token(browser)})
    assert not browser.get("/tasks/").context["user"].is_authenticated


def test_the_developer_sign_in_form_needs_its_csrf_token(settings):
    settings.DEBUG, settings.TAU2_DEV_LOGIN = True, True
    browser = _csrf_client()
    assert browser.post("/accounts/dev-login/", {"name": "eve"}).status_code == 403
    token = _token(browser)
    browser.post("/accounts/dev-login/", {"name": "eve", "csrfmiddlewaretoken": token})
    assert User.objects.filter(username="dev-eve").exists()


def test_admin_forms_need_their_csrf_token(reviewer_client, alice):
    browser = _csrf_client(reviewer_client)
    url = f"/admin/auth/user/{alice.pk}/change/"
    assert browser.get(url).status_code == 200
    response = browser.post(url, {"username": "alice", "is_staff": "on"})
    assert response.status_code == 403
    alice.refresh_from_db()
    assert not alice.is_staff
