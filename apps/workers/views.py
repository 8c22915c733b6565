"""``/health/workers``: is any worker alive, and since when."""

from django.http import JsonResponse
from django.utils.cache import add_never_cache_headers
from django.views.decorators.http import require_safe

from apps.workers.selectors import workers_liveness


@require_safe
def health_workers(request):
    """``{"alive", "since", "workers", "message"}``: 200 while a worker is alive, 503 when
    none is (for an orchestrator's probe; the live pages' banner polls it too)."""
    liveness = workers_liveness()
    response = JsonResponse(liveness.as_json(), status=200 if liveness.alive else 503)
    add_never_cache_headers(response)
    return response
