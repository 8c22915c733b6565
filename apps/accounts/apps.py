from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "apps.accounts"
    label = "accounts"
    verbose_name = "Sign-in and tokens"

    def ready(self) -> None:
        from apps.accounts import crypto

        crypto.sealed_fields_register(
            "accounts.HFCredential", "access_token_enc", "refresh_token_enc"
        )
