from django.apps import AppConfig

from apps.runs import kombu_compat


class RunsConfig(AppConfig):
    name = "apps.runs"
    label = "runs"

    def ready(self) -> None:
        # Every process that may hold a broker connection — a Celery worker above all —
        # gets the mended Redis transport (a broker restart at the wrong moment ended a
        # worker), and refuses to start on a kombu the mend was not checked against.
        kombu_compat.install()
