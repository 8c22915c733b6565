from django.apps import AppConfig


class PlayConfig(AppConfig):
    name = "apps.play"
    label = "play"

    def ready(self) -> None:
        # The runs app knows nothing of play: forks are taken over through its hook.
        from apps.play.services import play_hooks_register  # needs the app registry ready

        play_hooks_register()
