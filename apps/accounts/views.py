from __future__ import annotations

from django.contrib import messages
from django.contrib.auth import login, logout
from django.http import Http404
from django.shortcuts import redirect, render
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_GET, require_POST

from apps.accounts import services
from apps.accounts.access import signin_url
from apps.accounts.selectors import dev_login_enabled, signin_missing_settings

REASONS = {
    "start": "Starting a run or a play session needs you to sign in: a model on Hugging Face "
    "runs on your own Hugging Face credits (a Hugging Face sign-in), a model on a connection "
    "on that connection's key.",
    "runs": "On this deployment the team's runs are visible to signed-in people only.",
    "admin": "The admin is for staff: sign in with an account that was made staff "
    "(python manage.py grant_staff <username>).",
    "token": "Your Hugging Face sign-in needs renewing before you can start anything.",
}


def _safe_next(request, value: str | None, default: str = "/") -> str:
    if value and url_has_allowed_host_and_scheme(
        value, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return value
    return default


@require_GET
def signin(request):
    next_url = _safe_next(request, request.GET.get("next"))
    return render(
        request,
        "accounts/signin.html",
        {
            "reason": REASONS.get(request.GET.get("reason", "")),
            "signin_next": next_url,
            "dev_login": dev_login_enabled(),
            "signin_missing": signin_missing_settings(),
        },
    )


@require_POST
def signout(request):
    # The vault keeps the credential: runs the person already started still need it.
    logout(request)
    messages.info(request, "You are signed out.")
    return redirect("tasks:explorer")


def dev_login(request):
    """Sign in as ``dev-<name>`` without Hugging Face: DEBUG and TAU2_DEV_LOGIN only."""
    if not dev_login_enabled():
        raise Http404("There is no developer sign-in on this server.")
    if request.method != "POST":
        return redirect("accounts:signin")
    name = "".join(c for c in request.POST.get("name", "") if c.isalnum() or c in "-_")[:40]
    if not name:
        messages.error(request, "Give the developer account a name (letters, digits, - or _).")
        return redirect("accounts:signin")
    user = services.dev_user_get_or_create(name=name)
    login(request, user, backend="django.contrib.auth.backends.ModelBackend")
    messages.info(
        request,
        f"Signed in as {user.username} without Hugging Face: models on your connections run; "
        "models on Hugging Face's router need a Hugging Face sign-in.",
    )
    return redirect(_safe_next(request, request.POST.get("next")))


def admin_login(request):
    """The admin's own login form is replaced by Hugging Face sign-in."""
    next_url = _safe_next(request, request.GET.get("next"), default="/admin/")
    if request.user.is_authenticated and not request.user.is_staff:
        messages.error(request, f"{request.user.get_username()} is not staff on this server.")
    elif request.user.is_authenticated:
        return redirect(next_url)
    return redirect(signin_url(next_url=next_url, reason="admin"))
