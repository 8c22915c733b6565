"""A management command starts without the engine: Django's setup (every app's ready(),
the admin's autodiscovery) imports neither τ²-bench nor litellm, which take seconds to
import; a command that runs τ² imports it when it runs it.

Checked in a fresh process, by what it imported (sys.modules), never by a timing.
alice has signed in once; ``grant_staff`` makes her staff.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from social_django.models import UserSocialAuth

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("litellm", "tau2", "openai", "tau2_env.llm.gateway", "tau2_env.llm._tau2")
PROBE = """
import json, sys
from django.core.management import execute_from_command_line
try:
    execute_from_command_line(["manage.py", *sys.argv[1:]])
except SystemExit as exit:
    code = exit.code
else:
    code = 0
heavy = sorted(m for m in {heavy!r} if m in sys.modules)
print("\\n" + json.dumps({{"code": code, "heavy": heavy}}))
"""


def command(*args: str) -> tuple[dict, str]:
    """Run ``manage.py *args`` in a fresh interpreter: what it imported of
    :data:`HEAVY` and its exit code, and its output."""
    db = settings.DATABASES["default"]
    environ = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tau2site.settings",
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
    }
    environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY), *args],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    *output, last = done.stdout.rstrip("\n").split("\n")
    return json.loads(last), "\n".join(output) + done.stderr


def test_grant_staff_starts_without_importing_tau2_or_litellm():
    probe, output = command("grant_staff", "--help")
    assert probe == {"code": 0, "heavy": []}, output[-2000:]
    assert "Make the person who signed in with Hugging Face" in output


@pytest.fixture
def alice(committed_db):
    """alice as her first sign-in with Hugging Face leaves her, committed: the command's
    own process reads her."""
    user = get_user_model().objects.create_user(username="alice")
    UserSocialAuth.objects.create(
        user=user, provider="huggingface", uid="u-alice", extra_data={"username": "alice"}
    )
    return user


def test_grant_staff_makes_alice_staff_without_importing_the_engine(alice):
    probe, output = command("grant_staff", "alice")
    assert probe == {"code": 0, "heavy": []}, output[-2000:]
    assert "alice is now staff and superuser." in output
    alice.refresh_from_db()
    assert alice.is_staff and alice.is_superuser


def test_rotating_the_vault_keys_starts_without_the_engine(alice):
    probe, output = command("rotate_vault_keys")
    assert probe == {"code": 0, "heavy": []}, output[-2000:]
    assert "Re-encrypted" in output


def test_the_probe_sees_a_command_that_does_import_the_engine():
    # The check can fail: a command that imports the engine shows it in sys.modules.
    probe, output = command("shell", "-c", "import tau2_env.llm.gateway")
    assert probe["code"] == 0, output[-2000:]
    assert {"litellm", "tau2", "tau2_env.llm.gateway"} <= set(probe["heavy"])
