from django.apps import AppConfig


class ConnectionsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "apps.connections"
    verbose_name = "Model connections"

    def ready(self) -> None:
        from apps.accounts import crypto  # what rotate_vault_keys re-encrypts

        crypto.sealed_fields_register("connections.Connection", "api_key_enc", "headers_enc")
