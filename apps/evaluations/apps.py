import importlib
from collections.abc import Callable
from typing import Any

from django.apps import AppConfig


def _later(path: str) -> Callable[..., Any]:
    """The function at dotted ``path``, imported at its first call, not at start-up: the
    evaluations' services import τ² and litellm (seconds)."""
    module, _, name = path.rpartition(".")

    def call(*args: Any, **kwargs: Any) -> Any:
        return getattr(importlib.import_module(module), name)(*args, **kwargs)

    return call


class EvaluationsConfig(AppConfig):
    name = "apps.evaluations"
    label = "evaluations"
    verbose_name = "Evaluations"

    def ready(self) -> None:
        # The runs app knows nothing of evaluations: it tells us when a run ends.
        from apps.runs import hooks  # models inside: the app registry must be ready

        # A run of an evaluation lets its evaluation go on; an own agent's episode back in
        # its queue is told to its pages; an own agent's client pulls the next episode.
        hooks.on_run_settled(
            "evaluations", _later("apps.evaluations.services.evaluation_run_ended")
        )
        # A run of an evaluation taken by a worker or handed back is told to its pages.
        hooks.on_run_moved("evaluations", _later("apps.evaluations.services.evaluation_run_moved"))
        # A run of an evaluation under a standing review is queued for its review.
        hooks.on_run_settled("autoreview", _later("apps.runs.autoreview.run_settled_review"))
        hooks.on_run_requeued("evaluations", _later("apps.evaluations.external.run_requeued"))
        hooks.episode_claim_register(_later("apps.evaluations.external.episode_claim"))
