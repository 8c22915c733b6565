from django.apps import AppConfig


class AgentsConfig(AppConfig):
    """Outside agents on the OpenEnv and MCP faces: studio API keys, the credentials
    resolver the faces call, agent episodes recorded as runs, the connect page and the
    playground."""

    name = "apps.agents"
    label = "agents"
    verbose_name = "Agents"

    def ready(self) -> None:
        # tau2_env knows nothing of Django: the agent faces ask our resolver for credentials.
        # (Imported here: it imports models, which need the app registry ready.)
        from apps.agents.credentials import install

        install()
