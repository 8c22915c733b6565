"""Strict readers of settings from the environment (after healthchecks' hc/settings.py).

Each reader raises ``ImproperlyConfigured`` on a value it cannot read instead of
guessing, and every secret can also be given as a file (``NAME_FILE``), as Docker and
Kubernetes secrets are.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from tau2_env import config

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def load_env_file(default: Path) -> Path | None:
    """Put the variables of a ``.env`` file into ``os.environ``; returns the file read.

    The file is ``TAU2_ENV_FILE`` if that is set (empty: read none), else ``default``
    (the checkout's ``.env``), and only if it exists. The real environment wins over
    the file, so ``PORT=9000 make run`` or a container's variables still decide. Called
    by the settings before anything is read, so every reader here, the engine's
    (``tau2_env.config``) and the Celery worker see the same values.
    """
    from dotenv import load_dotenv

    chosen = os.environ.get("TAU2_ENV_FILE")
    path = Path(chosen).expanduser() if chosen else (None if chosen == "" else default)
    if path is None or not path.is_file():
        return None
    load_dotenv(path, override=False)
    return path


def envstr(name: str, default: str | None = None) -> str | None:
    """The variable's value, or the content of the file named by ``NAME_FILE``, or ``default``.

    An empty value counts as unset. The engine's reader (``tau2_env.config.env_value``)
    reads it: one reader for the whole project.
    """
    try:
        value = config.env_value(name)
    except config.ConfigError as exc:
        raise ImproperlyConfigured(str(exc)) from exc
    return default if value is None else value


def envbool(name: str, default: bool) -> bool:
    value = envstr(name)
    if value is None:
        return default
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be true or false, not {value!r}")


def envint(name: str, default: int, *, minimum: int | None = None) -> int:
    value = envstr(name)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, not {value!r}") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {number}")
    return number


def envlist(name: str, default: list[str] | None = None) -> list[str]:
    """A comma-separated list, blanks dropped."""
    value = envstr(name)
    if value is None:
        return list(default or [])
    return [item.strip() for item in value.split(",") if item.strip()]


def envfloat(name: str, default: float, *, minimum: float | None = None) -> float:
    value = envstr(name)
    if value is None:
        return default
    try:
        number = float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, not {value!r}") from None
    if minimum is not None and number < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}, not {number}")
    return number
