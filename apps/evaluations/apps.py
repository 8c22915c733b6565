from django.apps import AppConfig


def _run_settled(run) -> None:
    """The runs' settled hook: a run of an evaluation lets its evaluation go on."""
    # On first use, not at start-up: the services import τ² and litellm (seconds).
    from apps.evaluations.services import evaluation_run_ended

    evaluation_run_ended(run)


def _run_requeued(run_id: int) -> None:
    """The runs' requeued hook: an outside agent's episode is back in its queue."""
    from apps.evaluations.external import run_requeued

    run_requeued(run_id)


def _episode_claim(**kwargs):
    """The runs' episode claim: an outside agent's client pulls an evaluation's episode."""
    from apps.evaluations.external import episode_claim

    return episode_claim(**kwargs)


class EvaluationsConfig(AppConfig):
    name = "apps.evaluations"
    label = "evaluations"
    verbose_name = "Evaluations"

    def ready(self) -> None:
        # The runs app knows nothing of evaluations: it tells us when a run ends.
        from apps.runs import hooks  # models inside: the app registry must be ready

        hooks.on_run_settled("evaluations", _run_settled)
        hooks.on_run_requeued("evaluations", _run_requeued)
        hooks.episode_claim_register(_episode_claim)
