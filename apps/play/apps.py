from django.apps import AppConfig


def _fork_takeover(**fork):
    """The runs' fork takeover hook: a person continues a fork as a play session."""
    # On first use, not at start-up: the services import τ² and litellm (seconds).
    from apps.play.services import play_fork_build

    return play_fork_build(**fork)


class PlayConfig(AppConfig):
    name = "apps.play"
    label = "play"

    def ready(self) -> None:
        # The runs app knows nothing of play: forks are taken over through its hook.
        from apps.runs import hooks  # models inside: the app registry must be ready

        hooks.fork_takeover_register(_fork_takeover)
