from django.core.management.base import BaseCommand

from apps.inference.services import catalogue_refresh


class Command(BaseCommand):
    help = (
        "Copy the chat models with a live tool-capable provider from the Hugging Face router "
        "(TAU2_HF_ROUTER_URL/models) into the database. Keeps the stored catalogue when the "
        "router cannot be read; installs the fallback list when nothing is stored."
    )

    def handle(self, *args, **options):
        report = catalogue_refresh()
        style = self.style.SUCCESS if report.source == "router" else self.style.WARNING
        self.stdout.write(style(report.summary()))
        for label, names in (("new", report.created), ("removed", report.removed)):
            if names and report.source == "router":
                self.stdout.write(f"{label}: {', '.join(names)}")
