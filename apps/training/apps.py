from django.apps import AppConfig

from apps.agents import hooks


class TrainingConfig(AppConfig):
    """Training sessions: a studio key's named episodes (agent runs) with their reward
    curve, and the guard against training on a split the team evaluates on."""

    name = "apps.training"
    label = "training"
    verbose_name = "Training"

    def ready(self) -> None:
        # Agents never imports training: it asks the hooks registered here.
        from apps.training import services  # models inside: the app registry must be ready

        hooks.training_register(services.TRAINING_HOOKS)
