import logging

from django.core.management import call_command
from django.core.management.base import BaseCommand

from apps.inference.services import catalogue_refresh


class Command(BaseCommand):
    help = (
        "Get a database ready to serve, in one process (τ² is imported once): migrate, load "
        "τ²'s catalogue unless this τ² version is already loaded, and read the Inference "
        "Providers model catalogue from the router (keeping what is stored when it cannot be "
        "read). Safe to run at every start; never fails for want of a router."
    )

    def handle(self, *args, **options):
        call_command("migrate", interactive=False, verbosity=1)
        call_command("load_tasks", if_needed=True)
        self._refresh_models()

    def _refresh_models(self) -> None:
        """The router's catalogue at every start, so /models/ does not keep the fallback
        list (or last week's prices) after a restart with a working router. Offline, one
        line says so and the start goes on with what is stored (or the fallback list)."""
        # The service logs a warning when the router fails (right for beat's refresh);
        # here the line below says it once.
        service_log = logging.getLogger("apps.inference.services")
        level = service_log.level
        service_log.setLevel(logging.ERROR)
        try:
            report = catalogue_refresh()
        except Exception as exc:  # a start never fails for the catalogue
            self.stdout.write(f"Model catalogue not refreshed ({type(exc).__name__}: {exc}).")
            return
        finally:
            service_log.setLevel(level)
        again = "" if report.source == "router" else " Staff's Refresh on /models/ reads it again."
        self.stdout.write(f"Model catalogue: {report.summary()}{again}")
