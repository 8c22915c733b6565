"""Evaluations in the JSON API: the list (with the history's filters) and one evaluation
with τ²'s metrics, for people who may see the team's runs, as on the pages; starting one
(the form's fields, checked with the form's messages, once per ``Idempotency-Key``) and
pause / resume / stop / retry the failed runs, for a person — or a studio key that may
start, acting as its owner — as the page's buttons do."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from django.core.exceptions import PermissionDenied as NotAllowed
from django.core.exceptions import ValidationError
from django.db.models import Count
from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_field,
)
from rest_framework import generics, serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts.access import can_control, can_start, can_view_runs
from apps.accounts.grants import may_start
from apps.accounts.vault import SignInRequired
from apps.evaluations import baselines, selectors, services
from apps.evaluations.breakdowns import evaluation_breakdowns
from apps.evaluations.exports import scrub
from apps.evaluations.forms import EvaluationForm
from apps.evaluations.models import Evaluation
from apps.evaluations.selectors import EvaluationFilters
from apps.evaluations.summary import EvaluationSummary
from tau2_env.engine.evaluation import bootstrap_pass_hat_k

IDEMPOTENCY_HEADER = "Idempotency-Key"
READ_ONLY_KEY = (
    "This API key may only read: starting or controlling an evaluation needs a key that "
    "may read and start (make one on /accounts/keys/)."
)


class CanViewRuns(BasePermission):
    message = "Sign in to see the team's evaluations."

    def has_permission(self, request, view) -> bool:
        return can_view_runs(request.user)


class CanStart(BasePermission):
    """A signed-in person (a browser session, or a key acting as its owner) whose key,
    if any, may start; reads (GET) need only :class:`CanViewRuns`."""

    def has_permission(self, request, view) -> bool:
        if request.method in ("GET", "HEAD", "OPTIONS"):
            return can_view_runs(request.user)
        if not can_start(request.user):
            raise PermissionDenied("Sign in, or send a studio key, to start an evaluation.")
        if not may_start(request.auth):
            raise PermissionDenied(READ_ONLY_KEY)
        return True


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
            "retrieval_config",
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
    pass_hat_k_intervals = serializers.SerializerMethodField()
    breakdowns = serializers.SerializerMethodField()
    provenance = serializers.SerializerMethodField()
    downloads = serializers.SerializerMethodField()
    is_baseline = serializers.SerializerMethodField()
    verdict = serializers.SerializerMethodField()
    verdict_reason = serializers.SerializerMethodField()

    class Meta(EvaluationSerializer.Meta):
        fields = [
            *EvaluationSerializer.Meta.fields,
            "error",
            "query",
            "task_ids",
            "trial_seeds",
            "max_steps",
            "max_errors",
            "timeout",
            "concurrency",
            "provenance",
            "metrics",
            "pass_hat_k_intervals",
            "breakdowns",
            "downloads",
            "is_baseline",
            "verdict",
            "verdict_reason",
        ]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Each evaluation judged once against its baseline for the three fields that say it.
        self._judgements: dict[int, baselines.Verdict | baselines.NoVerdict] = {}

    def _judged(self, evaluation) -> baselines.Verdict | baselines.NoVerdict:
        if evaluation.pk not in self._judgements:
            self._judgements[evaluation.pk] = baselines.judge(evaluation)
        return self._judgements[evaluation.pk]

    def get_is_baseline(self, evaluation) -> bool:
        """Whether this evaluation is the pinned baseline of its settings."""
        judged = self._judged(evaluation)
        return isinstance(judged, baselines.NoVerdict) and judged.is_baseline

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_verdict(self, evaluation) -> dict | None:
        """Against the pinned baseline of its settings (``apps.evaluations.baselines``):
        ``outcome`` (better, worse, indistinguishable: the paired bootstrap interval of
        pass^1 over the tasks both scored leaves out 0 or not), ``provisional`` (either
        has not ended), ``pass_hat_k``, ``delta`` and ``interval`` (this − baseline),
        ``by_k``, the tasks that flipped (``regressed``, ``fixed``), both costs per run
        and the ``sentence``; ``null`` when there is none (``verdict_reason`` says why)."""
        judged = self._judged(evaluation)
        return judged.as_json() if isinstance(judged, baselines.Verdict) else None

    def get_verdict_reason(self, evaluation) -> str | None:
        """Why ``verdict`` is null: no baseline for these settings, this is the baseline,
        the baseline differs (and how), or nothing scored on both sides yet."""
        judged = self._judged(evaluation)
        return judged.reason if isinstance(judged, baselines.NoVerdict) else None

    @extend_schema_field(OpenApiTypes.OBJECT)
    def get_metrics(self, evaluation) -> dict:
        """Progress, τ²'s pass^k and average reward, means per run: computed now."""
        return selectors.evaluation_metrics(evaluation)

    @extend_schema_field(
        serializers.DictField(child=serializers.ListField(child=serializers.FloatField()))
    )
    def get_pass_hat_k_intervals(self, evaluation) -> dict[str, list[float]]:
        """pass^k's 95% percentile bootstrap interval by k ([low, high]; tasks resampled,
        1,000 times, seed 0, as the leaderboard's), over the runs scored so far; a k
        above the fewest trials any task has scored is left out."""
        rewards = selectors.rewards_by_task(selectors.evaluation_runs(evaluation))
        ks = range(1, evaluation.num_trials + 1)
        found = bootstrap_pass_hat_k(rewards, ks=ks, samples=1000, confidence=0.95)
        return {str(k): [low, high] for k, (low, high) in found.items()}

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


class EvaluationStartSerializer(serializers.Serializer):
    """What ``POST /api/evaluations/`` takes: the fields of the evaluation form
    (``/evaluations/new/``), checked by that form with its messages. Also accepted, as
    on the form: ``agent_temperature``, ``agent_top_p``, ``agent_max_tokens``,
    ``agent_reasoning_effort``, ``agent_extras`` and the same with ``user_``."""

    domain = serializers.CharField(help_text="A τ² domain, e.g. airline.")
    split = serializers.CharField(help_text="One of the domain's splits, e.g. test.")
    task_ids = serializers.ListField(
        child=serializers.CharField(),
        required=False,
        help_text="Some tasks of the domain (empty: the whole split, or what q matches).",
    )
    q = serializers.CharField(required=False, help_text="The task explorer's search.")
    kind = serializers.ChoiceField(choices=["", "write", "read"], required=False)
    agent_model = serializers.CharField(
        required=False,
        help_text="A router model (org/model[:provider|:policy]) or a connection's "
        "(@slug/model) its owner may use; or, instead, external_agent.",
    )
    external_agent = serializers.CharField(
        required=False,
        help_text="Your own agent's name and version (e.g. support-bot@2026-12-03), "
        "instead of agent_model: its program pulls the episodes over MCP or OpenEnv "
        "(reset(evaluation=<id>)) with a studio key.",
    )
    user_model = serializers.CharField(required=False, help_text="The simulated customer.")
    judge_model = serializers.CharField(required=False)
    mode = serializers.CharField(required=False, help_text="default, no_user or oracle_plan.")
    retrieval_config = serializers.CharField(
        required=False,
        help_text="banking_knowledge only: the retrieval configuration, as tau2 run "
        "--retrieval-config (empty: the domain's default, bm25).",
    )
    embedding_model = serializers.CharField(
        required=False,
        help_text="For a retrieval configuration that embeds (openai_embeddings, "
        "qwen_embeddings…): the connection model that embeds, @connection/model.",
    )
    num_trials = serializers.IntegerField(required=False, help_text="k: each task k times.")
    seed = serializers.IntegerField(required=False)
    max_steps = serializers.IntegerField(required=False)
    max_errors = serializers.IntegerField(required=False)
    timeout = serializers.FloatField(
        required=False,
        help_text="Seconds of wall clock per conversation, as tau2 run --timeout (τ² 1.x; "
        "refused in words on τ² 0.2, which has none). Empty: none.",
    )
    concurrency = serializers.IntegerField(required=False)
    name = serializers.CharField(required=False)


def _form_data(body: Any, *, user) -> dict[str, Any]:
    """A JSON body as the form's data: what it leaves out, the form's defaults (as the
    page starts with them); lists of task ids joined; ``null`` left out."""
    data = {
        name: str(field.initial)
        for name, field in EvaluationForm(user=user).fields.items()
        if field.initial not in (None, "")
    }
    for name, value in (body if isinstance(body, dict) else {}).items():
        if value is None:
            continue
        if name == "task_ids" and isinstance(value, list):
            value = " ".join(str(v) for v in value)
        data[str(name)] = value if isinstance(value, str) else str(value)
    return data


def _errors(form_errors: dict[str, list[str]]) -> dict[str, list[str]]:
    """The form's messages by field; the form's own (``__all__``) as DRF names them."""
    return {
        ("non_field_errors" if name == "__all__" else name): [str(m) for m in messages]
        for name, messages in form_errors.items()
    }


def _detail(request: Request, evaluation: Evaluation, **extra) -> dict:
    evaluation = selectors.evaluation_get(pk=evaluation.pk)
    evaluation.runs_count = evaluation.runs.count()
    return {**EvaluationDetailSerializer(evaluation, context={"request": request}).data, **extra}


@extend_schema(
    parameters=[
        OpenApiParameter("domain", str, description="Only this domain."),
        OpenApiParameter("model", str, description="Agent models containing these words."),
        OpenApiParameter("status", str, enum=Evaluation.Status.values),
        OpenApiParameter("mine", bool, description="Only the evaluations you started."),
    ]
)
class EvaluationList(generics.ListCreateAPIView):
    """The team's evaluations, newest first, with τ²'s pass^k when they last changed;
    ``POST`` starts one."""

    serializer_class = EvaluationSerializer
    permission_classes = [CanStart]

    def get_queryset(self):
        filters = EvaluationFilters.from_params(self.request.query_params)
        rows = selectors.evaluation_list(filters=filters, user=self.request.user)
        return rows.annotate(runs_count=Count("runs"))

    @extend_schema(
        request=EvaluationStartSerializer,
        parameters=[
            OpenApiParameter(
                IDEMPOTENCY_HEADER,
                str,
                location=OpenApiParameter.HEADER,
                description="Any string unique to this start (at most 255 characters): "
                "the same key again answers with the evaluation it started (200) and "
                "starts nothing; with another body it is refused (422).",
            )
        ],
        responses={
            201: EvaluationDetailSerializer,
            200: OpenApiResponse(
                EvaluationDetailSerializer, description="Started earlier with this key."
            ),
            422: OpenApiResponse(
                description="The key started an evaluation with another body (its id said)."
            ),
            400: OpenApiResponse(description="The form's messages, by field."),
            401: OpenApiResponse(description="An unknown or revoked key."),
            403: OpenApiResponse(description="No sign-in, or a key that may only read."),
        },
    )
    def post(self, request: Request, *args, **kwargs) -> Response:
        """Start an evaluation as the person (or the key's owner): their connections,
        budgets and caps; checked as the form checks it, with its messages."""
        form = EvaluationForm(_form_data(request.data, user=request.user), user=request.user)
        if not form.is_valid():
            return Response(_errors(form.errors), status=status.HTTP_400_BAD_REQUEST)
        try:
            evaluation, created = services.evaluation_create_once(
                user=request.user,
                idempotency_key=request.headers.get(IDEMPOTENCY_HEADER, ""),
                create=lambda: services.evaluation_start(user=request.user, data=form.cleaned_data),
                body_sha256=_fingerprint(request.data),
            )
        except services.IdempotencyKeyReused as exc:
            # draft-ietf-httpapi-idempotency-key-header: a key reused with another payload.
            return Response(
                {"non_field_errors": [str(exc)], "evaluation": exc.evaluation.pk},
                status=status.HTTP_422_UNPROCESSABLE_ENTITY,
            )
        except ValidationError as exc:
            errors = {
                (name if name in form.fields else "non_field_errors"): messages
                for name, messages in exc.message_dict.items()
            }
            return Response(errors, status=status.HTTP_400_BAD_REQUEST)
        except SignInRequired as exc:
            return Response({"non_field_errors": [str(exc)]}, status=status.HTTP_400_BAD_REQUEST)
        response = Response(
            _detail(request, evaluation),
            status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
        )
        response["Location"] = reverse("api:evaluation", kwargs={"pk": evaluation.pk})
        return response


def _fingerprint(data: Any) -> str:
    """The request body's SHA-256: its JSON with keys sorted (a form body as its lists)."""
    if hasattr(data, "lists"):  # a QueryDict: every value of every field
        data = {name: values for name, values in data.lists()}
    text = json.dumps(data, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class EvaluationDetail(generics.RetrieveAPIView):
    """One evaluation: its settings, where it came from and τ²'s metrics, computed now:
    progress, pass^k, average reward, the breakdowns with their intervals, costs, and
    the links to its files (τ²'s results file among them)."""

    serializer_class = EvaluationDetailSerializer
    permission_classes = [CanViewRuns]

    def get_object(self):
        evaluation = selectors.evaluation_get(pk=self.kwargs["pk"])
        evaluation.runs_count = evaluation.runs.count()
        return evaluation


class _Control(APIView):
    """``POST`` runs :attr:`act` on the evaluation, for its starter or staff (a key:
    one that may start, of its starter or of staff), as the page's button does."""

    permission_classes = [CanStart]
    act: Callable[[Evaluation], Any]

    def post(self, request: Request, pk: int) -> Response:
        evaluation = selectors.evaluation_get(pk=pk)
        if not can_control(request.user, owner_id=evaluation.created_by_id):
            raise PermissionDenied("Only whoever started this evaluation, or staff, may do that.")
        try:
            result = type(self).act(evaluation)
        except ValidationError as exc:
            return Response({"detail": " ".join(exc.messages)}, status=400)
        except SignInRequired as exc:  # the evaluation runs on its starter's token
            return Response({"detail": str(exc)}, status=400)
        extra = {"queued": result} if isinstance(result, int) else {}
        return Response(_detail(request, evaluation, **extra))


_CONTROL_RESPONSES = {
    200: EvaluationDetailSerializer,
    400: OpenApiResponse(description="Why not (e.g. the starter's sign-in expired)."),
    403: OpenApiResponse(description="Not its starter or staff, or a key that may only read."),
}


@extend_schema(request=None, responses=_CONTROL_RESPONSES)
class EvaluationPause(_Control):
    """Pause: no new run starts; runs already going finish."""

    @staticmethod
    def act(evaluation: Evaluation) -> Evaluation:
        return services.evaluation_pause(evaluation=evaluation)


@extend_schema(request=None, responses=_CONTROL_RESPONSES)
class EvaluationResume(_Control):
    """Resume a paused evaluation (its starter's sign-in must still be usable)."""

    @staticmethod
    def act(evaluation: Evaluation) -> Evaluation:
        return services.evaluation_resume(evaluation=evaluation)


@extend_schema(request=None, responses=_CONTROL_RESPONSES)
class EvaluationStop(_Control):
    """Stop: runs not started stop at once, runs going after their current turn."""

    @staticmethod
    def act(evaluation: Evaluation) -> Evaluation:
        return services.evaluation_stop(evaluation=evaluation)


@extend_schema(request=None, responses=_CONTROL_RESPONSES)
class EvaluationRetry(_Control):
    """Queue again the runs that failed on a transient error (``queued``: how many)."""

    @staticmethod
    def act(evaluation: Evaluation) -> int:
        return services.evaluation_retry_failed(evaluation=evaluation)


@extend_schema(
    request=None,
    responses={
        200: EvaluationDetailSerializer,
        400: OpenApiResponse(description="Why not (another pin raced this one)."),
        403: OpenApiResponse(
            description="Not its starter or staff (replacing or unpinning another's "
            "baseline: not whoever pinned it either), or a key that may only read."
        ),
    },
)
class EvaluationBaseline(APIView):
    """``POST`` pins the evaluation as the baseline of its settings (replacing the one
    pinned there); ``DELETE`` unpins it. Later comparable evaluations' ``verdict`` is
    judged against it. For its starter or staff, with a key that may start."""

    permission_classes = [CanStart]

    def _act(self, request: Request, pk: int, act: Callable[..., Any]) -> Response:
        evaluation = selectors.evaluation_get(pk=pk)
        try:
            act(evaluation=evaluation, by=request.user)
        except NotAllowed as exc:
            raise PermissionDenied(str(exc)) from None
        except ValidationError as exc:
            return Response({"detail": " ".join(exc.messages)}, status=400)
        return Response(_detail(request, evaluation))

    def post(self, request: Request, pk: int) -> Response:
        return self._act(request, pk, baselines.baseline_pin)

    def delete(self, request: Request, pk: int) -> Response:
        return self._act(request, pk, baselines.baseline_unpin)
