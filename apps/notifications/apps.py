from django.apps import AppConfig

from apps.evaluations import hooks


class NotificationsConfig(AppConfig):
    name = "apps.notifications"
    label = "notifications"
    verbose_name = "Notifications"

    def ready(self) -> None:
        # Evaluations know nothing of notifications: they tell us what happened. The
        # services are imported at the first news, not at start-up (they read τ²'s).
        hooks.on_evaluation_news(
            "notifications", "apps.notifications.services.notify_evaluation_news"
        )
