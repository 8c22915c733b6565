from django.apps import AppConfig


class EvaluationsConfig(AppConfig):
    name = "apps.evaluations"
    label = "evaluations"
    verbose_name = "Evaluations"

    def ready(self) -> None:
        # The runs app knows nothing of evaluations: it tells us when a run ends.
        from apps.evaluations.services import evaluations_hooks_register  # needs the registry

        evaluations_hooks_register()
