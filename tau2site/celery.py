"""The Celery application: `celery -A tau2site worker` and `celery -A tau2site beat`.

JSON only (never pickle), and tasks take ids, never tokens or whole objects.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tau2site.settings")

app = Celery("tau2site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.task(name="tau2site.ping")
def ping() -> str:
    """Answers "pong": lets health checks and tests see a worker take a task."""
    return "pong"
