from django.apps import AppConfig


def _evaluation_news(news) -> None:
    """The evaluations' news hook: queue the webhooks that want it."""
    # On first use, not at start-up: the services read evaluations' selectors (τ²).
    from apps.notifications.services import notify_evaluation_news

    notify_evaluation_news(news)


class NotificationsConfig(AppConfig):
    name = "apps.notifications"
    label = "notifications"
    verbose_name = "Notifications"

    def ready(self) -> None:
        # Evaluations know nothing of notifications: they tell us what happened.
        from apps.evaluations import hooks

        hooks.on_evaluation_news("notifications", _evaluation_news)
