from django.core.checks import Tags
from django.core.management.base import BaseCommand, CommandError

from apps.accounts.services import user_grant_staff


class Command(BaseCommand):
    # The models' checks only: the URL checks import every view, and with them the
    # engine (τ²-bench, litellm: seconds at start) that an accounts command never runs.
    requires_system_checks = [Tags.models]
    help = (
        "Make the person who signed in with Hugging Face as <username> staff (and superuser, "
        "so they see everything in the admin). They must have signed in once. Where the "
        "developer sign-in is on (DEBUG and TAU2_DEV_LOGIN: a laptop), <username> may also "
        "be a developer account, dev-<name>, as the page header shows it."
    )

    def add_arguments(self, parser):
        parser.add_argument("username", help="A Hugging Face username, or dev-<name> on a laptop.")
        parser.add_argument(
            "--no-superuser", action="store_true", help="Staff only: admin access, no permissions."
        )
        parser.add_argument("--revoke", action="store_true", help="Take staff rights away.")

    def handle(self, *args, username, no_superuser, revoke, **options):
        try:
            user = user_grant_staff(username=username, superuser=not no_superuser, revoke=revoke)
        except LookupError as exc:
            raise CommandError(str(exc)) from None
        if revoke:
            self.stdout.write(f"{user.get_username()} is no longer staff.")
        else:
            role = "staff" if no_superuser else "staff and superuser"
            self.stdout.write(self.style.SUCCESS(f"{user.get_username()} is now {role}."))
