"""First start on a laptop: settings from .env, a clean start, commands on the same
defaults, a sign-in page that says what to configure, and a favicon.

The start is run as a person runs it — ``manage.py`` and uvicorn in fresh processes, from
another directory, with a bare environment and a ``.env`` file — against the scripted
router (tests/support/llm_server.py) or a closed port.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.processes import free_port

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
# What must not appear in a clean start's output: warnings, tracebacks, ERROR log lines.
NOT_CLEAN = re.compile(r"(?i:warning|traceback|no hostname)|\bERROR\b")


def _laptop(tmp_path: Path, router_url: str) -> dict[str, str]:
    """A bare environment whose settings come from ``tmp_path/.env`` only."""
    (tmp_path / ".env").write_text(
        "# a laptop's .env\n"
        "DEBUG=true\n"
        f"TAU2_VAR_DIR={tmp_path / 'var'}\n"
        f"TAU2_HF_ROUTER_URL={router_url}   # the scripted router\n"
        "TAU2_MODELS_TIMEOUT=5\n",
        encoding="utf-8",
    )
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "LANG": "C.UTF-8",
        "PYTHONPATH": str(ROOT),  # this checkout, wherever the command runs
        "TAU2_ENV_FILE": str(tmp_path / ".env"),
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "HF_HUB_OFFLINE": "1",
    }


def _manage(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_a_laptop_starts_from_its_env_file_without_a_warning(tmp_path, scripted_llm_session):
    router = scripted_llm_session
    router.reset()
    env = _laptop(tmp_path, router.base_url)

    first = _manage(env, tmp_path, "bootstrap")

    output = first.stdout + first.stderr
    assert first.returncode == 0, output
    # DEBUG, TAU2_VAR_DIR and the router's URL all came from .env:
    assert (tmp_path / "var" / "db.sqlite3").exists()
    assert "Model catalogue: 2 models, 3 provider offers from the router" in output
    assert any(r.path == "/v1/models" for r in router.requests)
    assert not NOT_CLEAN.search(output), output

    # The real environment wins over .env; with no router the start still goes on, in a line.
    env_offline = {**env, "TAU2_HF_ROUTER_URL": f"http://127.0.0.1:{free_port()}/v1"}
    again = _manage(env_offline, tmp_path, "bootstrap")
    output = again.stdout + again.stderr
    assert again.returncode == 0, output
    notes = [line for line in output.splitlines() if "router" in line]
    assert notes == [
        "Model catalogue: The router could not be read (ConnectError: [Errno 111] Connection "
        "refused); kept the stored 2 models. Staff's Refresh on /models/ reads it again."
    ]
    assert "WARNING" not in output

    check = _manage(env, tmp_path, "check")
    assert check.returncode == 0, check.stderr
    assert check.stdout.strip() == "System check identified no issues (0 silenced)."
    assert not NOT_CLEAN.search(check.stderr), check.stderr

    # Management commands work on the same defaults, as the README says.
    made = _manage(
        env,
        tmp_path,
        "shell",
        "-c",
        "from django.contrib.auth import get_user_model; "
        "from social_django.models import UserSocialAuth; "
        "u = get_user_model().objects.create_user('alice'); "
        "UserSocialAuth.objects.create(user=u, provider='huggingface', uid='u-alice', "
        "extra_data={'username': 'alice'})",
    )
    assert made.returncode == 0, made.stderr
    granted = _manage(env, tmp_path, "grant_staff", "alice")
    assert granted.returncode == 0, granted.stderr
    assert granted.stdout.strip() == "alice is now staff and superuser."

    # uvicorn as `make run` starts it: no warning, the pages and the favicon answer.
    port = free_port()
    server = subprocess.Popen(
        [str(BIN / "uvicorn"), "tau2site.asgi:application", "--host", "127.0.0.1"]
        + ["--port", str(port)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/tasks/", timeout=5) as page:
                    assert page.status == 200
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, "no uvicorn"
                time.sleep(0.5)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/favicon.ico", timeout=5) as icon:
            assert icon.status == 200
            assert icon.headers["Content-Type"].startswith("image/svg+xml")
    finally:
        server.terminate()
        log = server.communicate(timeout=30)[0]
    assert "Application startup complete" in log
    assert "Embedded Celery worker started" in log
    assert not NOT_CLEAN.search(log), log


def test_without_env_or_debug_the_refusal_says_how_a_laptop_starts(tmp_path):
    env = {**_laptop(tmp_path, "http://127.0.0.1:9/v1"), "TAU2_ENV_FILE": ""}

    result = _manage(env, tmp_path, "check")

    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY must be set when DEBUG is off" in result.stderr
    assert "cp .env.example .env" in result.stderr


def test_the_laptop_example_is_a_laptop_file_and_production_lists_every_setting():
    from dotenv import dotenv_values

    laptop = dotenv_values(ROOT / ".env.example")
    production = dotenv_values(ROOT / ".env.production.example")

    # Everything else is commented out, with its reason, but the laptop's own model servers
    # (vLLM, Ollama on localhost), which the outbound policy refuses unless allowed.
    assert laptop == {"DEBUG": "true", "TAU2_OUTBOUND_ALLOW": "127.0.0.0/8,::1,localhost"}
    assert production["DEBUG"] == "false"
    for name in ("DJANGO_SECRET_KEY", "ALLOWED_HOSTS", "DATABASE_URL", "REDIS_URL"):
        assert name in production
    assert {"SOCIAL_AUTH_HUGGINGFACE_KEY", "TAU2_VAULT_KEYS"} <= set(production)


@pytest.mark.django_db
def test_the_favicon_answers_and_pages_name_it(client):
    response = client.get("/favicon.ico")
    assert response.status_code == 302
    icon = client.get(response["Location"])
    assert icon.status_code == 200
    assert icon["Content-Type"].startswith("image/svg+xml")
    assert b"<svg" in b"".join(icon.streaming_content)

    page = client.get("/tasks/").content.decode()
    assert re.search(r'<link rel="icon" href="/static/favicon[^"]*\.svg"', page)


@pytest.mark.django_db
def test_sign_in_without_oauth_settings_names_the_missing_ones(client, settings):
    settings.SOCIAL_AUTH_HUGGINGFACE_KEY = None
    settings.SOCIAL_AUTH_HUGGINGFACE_SECRET = None

    # The header's button posts to social-auth's begin: it comes back to the sign-in page.
    response = client.post("/auth/login/huggingface/", {"next": "/runs/"})
    assert response.status_code == 302
    assert response["Location"] == "/accounts/sign-in/"
    page = client.get(response["Location"]).content.decode()

    assert 'data-testid="signin-unconfigured"' in page
    assert (
        "<code>SOCIAL_AUTH_HUGGINGFACE_KEY</code> and <code>SOCIAL_AUTH_HUGGINGFACE_SECRET</code>"
        in page
    )
    assert "could not be reached" not in page
    main = page.split("<main", 1)[-1]
    assert "/auth/login/huggingface/" not in main  # no sign-in button that cannot work


@pytest.mark.django_db
def test_sign_in_names_only_the_setting_still_missing(client, settings):
    settings.SOCIAL_AUTH_HUGGINGFACE_KEY = "client-id"
    settings.SOCIAL_AUTH_HUGGINGFACE_SECRET = None

    page = client.get("/accounts/sign-in/").content.decode()

    assert "It needs <code>SOCIAL_AUTH_HUGGINGFACE_SECRET</code>\n" in page
    assert "<code>SOCIAL_AUTH_HUGGINGFACE_KEY</code>" not in page


@pytest.mark.django_db
def test_a_configured_sign_in_shows_the_button_and_no_complaint(client, settings):
    settings.SOCIAL_AUTH_HUGGINGFACE_KEY = "client-id"
    settings.SOCIAL_AUTH_HUGGINGFACE_SECRET = "client-secret"

    page = client.get("/accounts/sign-in/").content.decode()

    assert 'data-testid="signin-unconfigured"' not in page
    assert "/auth/login/huggingface/" in page.split("<main", 1)[-1]
