"""One row per worker (its Celery node name), written by the worker itself
(``apps.workers.heartbeat``)."""

from django.db import models


class WorkerBeat(models.Model):
    """A Celery worker process (a ``celery worker`` or the web process's embedded one)
    and its last sign of life. A node name is one worker's identity in Celery (no two
    alive at once), so a restarted worker takes over its old incarnation's row.

    Times are the database's clock (``Now()``), written and compared there, so workers
    and web servers on machines whose clocks differ agree on who is alive. A graceful
    shutdown sets ``stopped_at``; a killed worker just stops beating.
    """

    hostname = models.CharField(
        max_length=255, unique=True, help_text="Celery's node name (name@host), one per worker."
    )
    pid = models.PositiveIntegerField(help_text="The process now beating under that name.")
    queues = models.JSONField(default=list, help_text="The queues it consumes.")
    started_at = models.DateTimeField()
    last_beat = models.DateTimeField(db_index=True)
    stopped_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.hostname} (pid {self.pid})"
