from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.utils.functional import lazy
from django.views.generic import RedirectView

from apps.accounts import views as accounts_views
from apps.evaluations.views import results as evaluation_results
from apps.workers import views as workers_views

urlpatterns = [
    path("", RedirectView.as_view(pattern_name="tasks:explorer", permanent=False)),
    # Browsers ask for /favicon.ico whatever the page says; the icon is a static SVG.
    path("favicon.ico", RedirectView.as_view(url=lazy(static, str)("favicon.svg"))),
    path("tasks/", include("apps.tasks.urls")),
    path("runs/", include("apps.runs.urls")),
    path("races/", include("apps.races.urls")),
    path("play/", include("apps.play.urls")),
    path("evaluations/", include("apps.evaluations.urls")),
    path("schedules/", include("apps.schedules.urls")),
    path("leaderboard/", evaluation_results.leaderboard, name="leaderboard"),
    # OpenEnv's /health stays the process's own (compose's web and openenv probes ask it).
    path("health/workers", workers_views.health_workers, name="health_workers"),
    path("api/", include("tau2site.api_urls")),
    path("accounts/keys/", include("apps.agents.key_urls")),
    path("accounts/", include("apps.accounts.urls")),
    path("agents/", include("apps.agents.urls")),
    path("training/", include("apps.training.urls")),
    path("datasets/", include("apps.datasets.urls")),
    path("connections/", include("apps.connections.urls")),
    path("notifications/", include("apps.notifications.urls")),
    path("auth/", include("social_django.urls", namespace="social")),
    path("admin/login/", accounts_views.admin_login, name="admin_login"),
    path("", include("apps.inference.urls")),  # /models/, /api/models/
    path("admin/", admin.site.urls),
]
