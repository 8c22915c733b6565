"""The Celery task on a real worker process (which reads and writes the test database)."""

from __future__ import annotations

import pytest
from django.conf import settings

from apps.inference.models import InferenceModel, ProviderOffer
from apps.inference.tasks import refresh_catalogue


@pytest.fixture
def clean_catalogue(committed_db):
    """Committed rows, so the worker's writes are seen; the catalogue is emptied after."""
    InferenceModel.objects.all().delete()
    yield
    InferenceModel.objects.all().delete()


@pytest.mark.slow
def test_the_worker_refreshes_the_catalogue_from_the_router(celery_worker, clean_catalogue, router):
    # The worker's TAU2_HF_ROUTER_URL is the session's scripted server, which `router`
    # made answer the recorded catalogue.
    result = refresh_catalogue.delay()
    report = result.get(timeout=60)

    assert report["source"] == "router"
    assert report["url"] == f"{router.base_url}/models"
    assert sorted(report["created"]) == sorted(
        InferenceModel.objects.values_list("name", flat=True)
    )
    assert InferenceModel.objects.count() == 4
    assert ProviderOffer.objects.filter(model__name="openai/gpt-oss-120b").count() == 4


def test_beat_schedules_the_refresh_every_interval():
    entry = settings.CELERY_BEAT_SCHEDULE["inference-refresh-catalogue"]

    assert entry["task"] == refresh_catalogue.name == "apps.inference.tasks.refresh_catalogue"
    assert entry["schedule"] == settings.TAU2_MODELS_REFRESH_SECONDS
