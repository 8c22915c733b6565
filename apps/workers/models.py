"""One row per worker process, written by the process itself (``apps.workers.heartbeat``)."""

from django.db import models


class WorkerBeat(models.Model):
    """A Celery worker process (a ``celery worker`` or the web process's embedded one)
    and its last sign of life.

    Times are the database's clock (``Now()``), written and compared there, so workers
    and web servers on machines whose clocks differ agree on who is alive. A graceful
    shutdown sets ``stopped_at``; a killed worker just stops beating.
    """

    hostname = models.CharField(max_length=255, help_text="Celery's node name (name@host).")
    pid = models.PositiveIntegerField()
    queues = models.JSONField(default=list, help_text="The queues it consumes.")
    started_at = models.DateTimeField()
    last_beat = models.DateTimeField(db_index=True)
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["hostname", "pid"], name="workerbeat_one_row_per_process")
        ]

    def __str__(self) -> str:
        return f"{self.hostname} (pid {self.pid})"
