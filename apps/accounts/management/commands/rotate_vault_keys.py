from django.core.checks import Tags
from django.core.management.base import BaseCommand

from apps.accounts.services import credential_rotate_keys


class Command(BaseCommand):
    # The models' checks only: the URL checks import every view, and with them the
    # engine (τ²-bench, litellm: seconds at start) that an accounts command never runs.
    requires_system_checks = [Tags.models]
    help = (
        "Re-encrypt every sealed secret (Hugging Face tokens, connections' keys and headers, "
        "webhooks' URLs and secrets) under the first key of TAU2_VAULT_KEYS. "
        "Put the new key first, keep the old ones, run this, then drop the old keys."
    )

    def handle(self, *args, **options):
        changed = credential_rotate_keys()
        for label, count in changed.items():
            self.stdout.write(self.style.SUCCESS(f"Re-encrypted {count} {label} row(s)."))
