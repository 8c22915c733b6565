"""Evaluations in the JSON API: the list (with the history's filters) and one evaluation
with τ²'s metrics. Same rule as the pages: for people who may see the team's runs."""

from __future__ import annotations

from django.db.models import Count
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import generics, serializers
from rest_framework.permissions import BasePermission

from apps.accounts.access import can_view_runs
from apps.evaluations import selectors
from apps.evaluations.breakdowns import evaluation_breakdowns
from apps.evaluations.exports import scrub
from apps.evaluations.models import Evaluation
from apps.evaluations.selectors import EvaluationFilters
from apps.evaluations.summary import EvaluationSummary


class CanViewRuns(BasePermission):
    message = "Sign in to see the team's evaluations."

    def has_permission(self, request, view) -> bool:
        return can_view_runs(request.user)


def _absolute(serializer: serializers.Serializer, path: str) -> str:
    request = serializer.context.get("request")
    return request.build_absolute_uri(path) if request else path


class EvaluationSerializer(serializers.ModelSerializer):
    started_by = serializers.CharField(source="created_by.username", read_only=True)
    runs = serializers.IntegerField(source="runs_count", read_only=True)
    pass_hat_ks = serializers.SerializerMethodField()
    avg_reward = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField()
    page = serializers.SerializerMethodField()

    class Meta:
        model = Evaluation
        fields = [
            "id",
            "url",
            "page",
            "name",
            "status",
            "domain",
            "split",
            "full_split",
            "agent_model",
            "user_model",
            "mode",
            "num_trials",
            "seed",
            "runs",
            "pass_hat_ks",
            "avg_reward",
            "started_by",
            "created_at",
            "finished_at",
        ]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Each evaluation's stored summary, read once for the fields that show it.
        self._summaries: dict[int, EvaluationSummary | None] = {}

    def _summary(self, evaluation: Evaluation) -> EvaluationSummary | None:
        if evaluation.pk not in self._summaries:
            self._summaries[evaluation.pk] = selectors.evaluation_summary_stored(evaluation)
        return self._summaries[evaluation.pk]

    @extend_schema_field(serializers.DictField(child=serializers.FloatField()))
    def get_pass_hat_ks(self, evaluation) -> dict[str, float]:
        """τ²'s pass^k by k, when the evaluation last changed ({} before it first ends)."""
        summary = self._summary(evaluation)
        return summary.pass_hat_ks_json() if summary else {}

    def get_avg_reward(self, evaluation) -> float | None:
        summary = self._summary(evaluation)
        return summary.avg_reward if summary else None

    @extend_schema_field(OpenApiTypes.URI)
    def get_url(self, evaluation) -> str:
        return _absolute(self, reverse("api:evaluation", kwargs={"pk": evaluation.pk}))

    @extend_schema_field(OpenApiTypes.URI)
    def get_page(self, evaluation) -> str:
        return _absolute(self, evaluation.get_absolute_url())


class EvaluationDetailSerializer(EvaluationSerializer):
    metrics = serializers.SerializerMethodField()
    breakdowns = serializers.SerializerMethodField()
    provenance = serializers.SerializerMethodField()
    downloads = serializers.SerializerMethodField()

    class Meta(EvaluationSerializer.Meta):
        fields = [
            *EvaluationSerializer.Meta.fields,
            "error",
            "query",
            "task_ids",
            "trial_seeds",
            "max_steps",
            "max_errors",
            "concurrency",
            "provenance",
            "metrics",
            "breakdowns",
            "downloads",
        ]

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_metrics(self, evaluation) -> dict:
        """Progress, τ²'s pass^k and average reward, means per run: computed now."""
        return selectors.evaluation_metrics(evaluation)

    @extend_schema_field(serializers.ListField(child=serializers.DictField()))
    def get_breakdowns(self, evaluation) -> list[dict]:
        """The paper's breakdowns: pass^1 by group of tasks (expected actions in buckets
        0–1, 2–3, 4–6, 7+; persona; telecom issue type and sub-issue; read-only vs
        write), each group with its n (tasks), runs and 95% bootstrap interval
        (``ci95``); ``applies`` is false, with ``note`` saying why, for a grouping the
        domain's tasks lack (``apps.evaluations.breakdowns``)."""
        return [b.as_json() for b in evaluation_breakdowns(evaluation)]

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_provenance(self, evaluation) -> dict:
        return scrub(evaluation.provenance or {})

    @extend_schema_field(serializers.DictField(child=serializers.URLField()))
    def get_downloads(self, evaluation) -> dict[str, str]:
        json_path = reverse("evaluations:json", kwargs={"pk": evaluation.pk})
        return {
            "studio_json": _absolute(self, json_path),
            "tau2_results": _absolute(self, f"{json_path}?format=tau2"),
            "csv": _absolute(self, reverse("evaluations:csv", kwargs={"pk": evaluation.pk})),
        }


@extend_schema(
    parameters=[
        OpenApiParameter("domain", str, description="Only this domain."),
        OpenApiParameter("model", str, description="Agent models containing these words."),
        OpenApiParameter("status", str, enum=Evaluation.Status.values),
        OpenApiParameter("mine", bool, description="Only the evaluations you started."),
    ]
)
class EvaluationList(generics.ListAPIView):
    """The team's evaluations, newest first, with τ²'s pass^k when they last changed."""

    serializer_class = EvaluationSerializer
    permission_classes = [CanViewRuns]

    def get_queryset(self):
        filters = EvaluationFilters.from_params(self.request.query_params)
        rows = selectors.evaluation_list(filters=filters, user=self.request.user)
        return rows.annotate(runs_count=Count("runs"))


class EvaluationDetail(generics.RetrieveAPIView):
    """One evaluation: its settings, where it came from and τ²'s metrics, computed now."""

    serializer_class = EvaluationDetailSerializer
    permission_classes = [CanViewRuns]

    def get_object(self):
        evaluation = selectors.evaluation_get(pk=self.kwargs["pk"])
        evaluation.runs_count = evaluation.runs.count()
        return evaluation
