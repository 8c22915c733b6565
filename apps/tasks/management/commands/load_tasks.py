from django.core.management.base import BaseCommand, CommandError

from apps.tasks.services import catalogue_load


class Command(BaseCommand):
    help = (
        "Copy every domain, split, tool and task of the installed τ²-bench into the database. "
        "Idempotent: unchanged domains are skipped."
    )

    def add_arguments(self, parser):
        parser.add_argument("domains", nargs="*", help="Only these domains (default: all).")
        parser.add_argument("--force", action="store_true", help="Reload unchanged domains too.")

    def handle(self, *args, domains, force, **options):
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
