"""A dataset pushed to the Hugging Face Hub: who asked, what, where, and how it went.

The selection is kept as its query string (run filters only: it never holds a token);
the token is read from the person's vault by the worker when it pushes, never stored here.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class DatasetPush(models.Model):
    """One push of a selection's datasets to a dataset repository on the Hub.

    Status: QUEUED → RUNNING (a worker claims it, once) → DONE (``url`` is the repo,
    ``commit_url`` its commit) or FAILED (``error`` says why, in words). DONE and FAILED
    are final; a duplicated or retried task finds the push claimed and does nothing.
    """

    class Status(models.TextChoices):
        QUEUED = "queued", "queued"
        RUNNING = "running", "pushing"
        DONE = "done", "pushed"
        FAILED = "failed", "failed"

    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="dataset_pushes"
    )
    query = models.TextField(help_text="The selection's query string (run filters, format).")
    repo_id = models.CharField(max_length=200, help_text="name or namespace/name on the Hub.")
    private = models.BooleanField(default=True)
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.QUEUED)
    error = models.TextField(blank=True)
    url = models.URLField(max_length=500, blank=True)
    commit_url = models.URLField(max_length=500, blank=True)
    rows = models.PositiveIntegerField(default=0)
    pairs = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.CheckConstraint(
                condition=~Q(status="failed") | ~Q(error=""),
                name="datasetpush_failure_has_a_reason",
            ),
        ]

    def __str__(self) -> str:
        return f"Dataset push {self.pk} to {self.repo_id} ({self.status})"

    @property
    def is_final(self) -> bool:
        return self.status in (self.Status.DONE, self.Status.FAILED)
