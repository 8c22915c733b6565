from django.apps import AppConfig

from tau2_env import versions


class TasksConfig(AppConfig):
    name = "apps.tasks"
    label = "tasks"
    verbose_name = "τ²-bench tasks"

    def ready(self) -> None:
        # The lowest app, always installed: web, Celery workers and manage.py all refuse
        # to start on an untested τ², litellm, openenv or MCP SDK. The overrides themselves
        # (tau2_env.llm.compat.install) are applied by the engine's entry points before τ² runs
        # (an Episode, the OpenEnv and MCP faces, a scope building τ²'s environments), so
        # a manage.py command that never runs τ² does not import it.
        versions.require_all()
