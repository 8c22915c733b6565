from django.core.management import call_command
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = (
        "Get a database ready to serve, in one process (τ² is imported once): migrate, load "
        "τ²'s catalogue unless this τ² version is already loaded, and read the Inference "
        "Providers model catalogue when none is stored yet. Safe to run at every start."
    )

    def handle(self, *args, **options):
        call_command("migrate", interactive=False, verbosity=1)
        call_command("load_tasks", if_needed=True)
        from apps.inference.models import InferenceModel

        if not InferenceModel.objects.exists():
            call_command("refresh_models")
