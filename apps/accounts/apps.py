from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "apps.accounts"
    label = "accounts"
    verbose_name = "Sign-in and tokens"

    def ready(self) -> None:
        # Studio API keys on the OpenEnv and MCP faces (tau2_env knows nothing of Django).
        from apps.accounts.agent_keys import install

        install()
