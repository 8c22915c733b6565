from django.apps import AppConfig


def _run_settled(run) -> None:
    """The runs' settled hook: a run of an evaluation lets its evaluation go on."""
    # On first use, not at start-up: the services import τ² and litellm (seconds).
    from apps.evaluations.services import evaluation_run_ended

    evaluation_run_ended(run)


class EvaluationsConfig(AppConfig):
    name = "apps.evaluations"
    label = "evaluations"
    verbose_name = "Evaluations"

    def ready(self) -> None:
        # The runs app knows nothing of evaluations: it tells us when a run ends.
        from apps.runs import hooks  # models inside: the app registry must be ready

        hooks.on_run_settled("evaluations", _run_settled)
