from django.core.management.base import BaseCommand, CommandError

from apps.tasks.models import Domain
from apps.tasks.selectors import catalogue_latest
from apps.tasks.services import catalogue_load
from tau2_env.engine.catalog import domain_names, tau2_version


class Command(BaseCommand):
    help = (
        "Copy every domain, split, tool and task of the installed τ²-bench into the database. "
        "Idempotent: unchanged domains are skipped."
    )

    def add_arguments(self, parser):
        parser.add_argument("domains", nargs="*", help="Only these domains (default: all).")
        parser.add_argument("--force", action="store_true", help="Reload unchanged domains too.")
        parser.add_argument(
            "--if-needed",
            action="store_true",
            help="Do nothing if the catalogue was already loaded from this same τ² version "
            "(fast start-up; a plain run compares every domain's content).",
        )

    def handle(self, *args, domains, force, if_needed, **options):
        if if_needed and not force and not domains:
            latest = catalogue_latest()
            stored = set(Domain.objects.values_list("name", flat=True))
            if (
                latest is not None
                and latest.tau2_version == tau2_version()
                and stored == set(domain_names())
            ):
                self.stdout.write(f"Catalogue already loaded from {latest.tau2_version}.")
                return
        try:
            report = catalogue_load(domains=domains or None, force=force)
        except KeyError as exc:
            raise CommandError(exc.args[0]) from exc
        for name, counts in report.counts.items():
            state = "loaded" if name in report.changed else "unchanged"
            splits = ", ".join(f"{split} {n}" for split, n in counts.items())
            self.stdout.write(f"{name:18} {state:9} {splits}")
        self.stdout.write(
            self.style.SUCCESS(f"τ² {report.tau2_version}, task set {report.task_set_hash}")
        )
