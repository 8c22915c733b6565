from django.core.management.base import BaseCommand

from apps.accounts.services import credential_rotate_keys


class Command(BaseCommand):
    help = (
        "Re-encrypt every stored Hugging Face token under the first key of TAU2_VAULT_KEYS. "
        "Put the new key first, keep the old ones, run this, then drop the old keys."
    )

    def handle(self, *args, **options):
        changed = credential_rotate_keys()
        self.stdout.write(self.style.SUCCESS(f"Re-encrypted {changed} credential(s)."))
