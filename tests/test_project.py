"""The project's settings, its two run modes and its worker, as an operator meets them."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from tau2site import env

ROOT = Path(__file__).resolve().parent.parent
PROD_KEYS = ("DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY", "DEBUG")


def run_python(code: str, **environ: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with the project's settings and ``environ``."""
    base = {k: v for k, v in os.environ.items() if k not in PROD_KEYS}
    base.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env={**base, "DJANGO_SETTINGS_MODULE": "tau2site.settings", **environ},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_envbool_refuses_anything_but_true_or_false(monkeypatch):
    monkeypatch.setenv("SOME_FLAG", "maybe")
    with pytest.raises(ImproperlyConfigured, match="SOME_FLAG must be true or false"):
        env.envbool("SOME_FLAG", False)
    monkeypatch.setenv("SOME_FLAG", "Yes")
    assert env.envbool("SOME_FLAG", False) is True


def test_envint_refuses_words_and_small_numbers(monkeypatch):
    monkeypatch.setenv("SOME_INT", "many")
    with pytest.raises(ImproperlyConfigured):
        env.envint("SOME_INT", 1)
    monkeypatch.setenv("SOME_INT", "0")
    with pytest.raises(ImproperlyConfigured, match="at least 1"):
        env.envint("SOME_INT", 1, minimum=1)


def test_a_secret_can_come_from_a_file(monkeypatch, tmp_path):
    secret = tmp_path / "key"
    secret.write_text("from-a-file\n")
    monkeypatch.delenv("SOME_SECRET", raising=False)
    monkeypatch.setenv("SOME_SECRET_FILE", str(secret))
    assert env.envstr("SOME_SECRET") == "from-a-file"


def test_embedded_defaults_need_no_database_server_and_no_redis(tmp_path):
    result = run_python(
        """
        import django; django.setup()
        from django.conf import settings
        print(settings.DATABASES["default"]["ENGINE"])
        print(settings.CHANNEL_LAYERS["default"]["BACKEND"])
        print(settings.CELERY_BROKER_URL, settings.TAU2_EMBEDDED_WORKER)
        """,
        DEBUG="true",
        TAU2_VAR_DIR=str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:3] == [
        "django.db.backends.sqlite3",
        "channels.layers.InMemoryChannelLayer",
        "memory://localhost/ True",
    ]


def test_the_embedded_worker_runs_tasks_inside_the_process(tmp_path):
    result = run_python(
        """
        import django; django.setup()
        from tau2site import embedded_worker
        from tau2site.celery import ping
        assert embedded_worker.start()
        # The worker marks its process as "inside a worker"; this process is the web side.
        print(ping.delay().get(timeout=30, disable_sync_subtasks=False))
        embedded_worker.stop()
        """,
        DEBUG="true",
        TAU2_VAR_DIR=str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith("pong")


def test_production_refuses_to_start_without_a_secret_key(tmp_path):
    result = run_python("import django; django.setup()", DEBUG="false", TAU2_VAR_DIR=str(tmp_path))
    assert result.returncode != 0
    assert "DJANGO_SECRET_KEY must be set when DEBUG is off" in result.stderr


def test_check_deploy_is_clean_with_production_settings(tmp_path):
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env={
            **{k: v for k, v in os.environ.items() if k not in PROD_KEYS},
            "DEBUG": "false",
            "DJANGO_SECRET_KEY": "x7-" + "q9Lm2Zr8Vt4Kp1Wc6Hy3Nd5Bf0Gs" * 3,
            "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/postgres",
            "REDIS_URL": "redis://127.0.0.1:6379/0",
            "ALLOWED_HOSTS": "tau2.example.org",
            "CSRF_TRUSTED_ORIGINS": "https://tau2.example.org",
            "SECURE_SSL_REDIRECT": "true",
            "SESSION_COOKIE_SECURE": "true",
            "CSRF_COOKIE_SECURE": "true",
            "SECURE_HSTS_SECONDS": "31536000",
            "TAU2_VAR_DIR": str(tmp_path),
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_models_and_migrations_agree():
    result = subprocess.run(
        [sys.executable, "manage.py", "makemigrations", "--check", "--dry-run"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "DJANGO_ALLOW_ASYNC_UNSAFE": ""},
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.django_db
def test_a_celery_worker_on_redis_takes_tasks(celery_worker):
    from tau2site.celery import ping

    assert ping.delay().get(timeout=30) == "pong"


def test_webhooks_are_matched_on_the_laptops_sqlite_too(tmp_path):
    """Which subscriptions an event reaches is worked out on SQLite as on PostgreSQL (it
    once used JSON containment, which SQLite refuses: a laptop's webhooks never fired)."""
    result = run_python(
        """
        import django; django.setup()
        from django.core.management import call_command
        from django.db import connection
        call_command("migrate", verbosity=0)
        from apps.notifications.models import Subscription
        from apps.notifications.services import notify
        for events in (["evaluation.finished"], ["evaluation.failed"]):
            Subscription.objects.create(
                name="/".join(events), url_enc="-", url_shown="-", secret_enc="-", events=events
            )
        made = notify(event="evaluation.finished", user_id=None, detail="by hand")
        print(connection.vendor, [d.subscription.name for d in made])
        """,
        DEBUG="true",
        TAU2_VAR_DIR=str(tmp_path),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "sqlite ['evaluation.finished']"
