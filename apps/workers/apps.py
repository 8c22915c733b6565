import logging

from django.apps import AppConfig


class WorkerlessIsNoError(logging.Filter):
    """Drops Django's "Service Unavailable" line for ``/health/workers``: its 503 is the
    answer "no worker is alive", which every open live page asks every 10 s — not a
    fault of the server to log at ERROR each time."""

    def filter(self, record: logging.LogRecord) -> bool:
        match = getattr(getattr(record, "request", None), "resolver_match", None)
        quiet = getattr(record, "status_code", None) == 503 and match is not None
        return not (quiet and match.url_name == "health_workers")


class WorkersConfig(AppConfig):
    name = "apps.workers"
    label = "workers"
    verbose_name = "Worker liveness"

    def ready(self) -> None:
        logging.getLogger("django.request").addFilter(WorkerlessIsNoError())
