"""Schedules in the JSON API: ``POST /api/evaluations/<id>/schedule/`` repeats an
evaluation on a schedule, as the person (or a studio key that may start, acting as its
owner), as the page's "Repeat on a schedule…" form does."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied as NotAllowed
from django.core.exceptions import ValidationError
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.evaluations.api import CanStart
from apps.evaluations.selectors import evaluation_get
from apps.schedules import services
from apps.schedules.crons import cron_describe
from apps.schedules.forms import ScheduleForm
from apps.schedules.models import EvaluationSchedule


class ScheduleRequestSerializer(serializers.Serializer):
    """What ``POST /api/evaluations/<id>/schedule/`` takes: the page form's fields."""

    preset = serializers.ChoiceField(
        choices=["nightly", "weekly", "custom"],
        help_text="nightly (every day at 02:00), weekly (Mondays at 03:00), or custom: cron.",
    )
    cron = serializers.CharField(
        required=False,
        help_text="With custom: minute hour day-of-month month day-of-week, in the "
        "server's time zone, at most once an hour (e.g. 30 1 * * 1-5).",
    )
    name = serializers.CharField(required=False, help_text="Default: the evaluation's name.")


class ScheduleSerializer(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.get_username", read_only=True)
    when = serializers.SerializerMethodField()

    class Meta:
        model = EvaluationSchedule
        fields = [
            "id",
            "name",
            "preset",
            "cron",
            "when",
            "enabled",
            "owner",
            "source",
            "created_at",
            "last_run_at",
            "last_evaluation",
            "last_error",
        ]

    def get_when(self, schedule) -> str:
        return cron_describe(schedule.cron)


@extend_schema(
    request=ScheduleRequestSerializer,
    responses={
        201: ScheduleSerializer,
        400: OpenApiResponse(description="The cron or the start refused, in words, by field."),
        403: OpenApiResponse(description="No sign-in, or a key that may only read."),
        404: OpenApiResponse(description="No such evaluation."),
    },
)
class EvaluationScheduleCreate(APIView):
    """Repeat the evaluation on a schedule: each tick starts a new evaluation with its
    settings, as you (your connections, budgets and caps), judged against the pinned
    baseline when it finishes; a tick missed while beat was down runs once."""

    permission_classes = [CanStart]

    def post(self, request: Request, pk: int) -> Response:
        evaluation = evaluation_get(pk=pk)
        body = request.data if isinstance(request.data, dict) else {}
        form = ScheduleForm({k: str(v) for k, v in body.items() if v is not None})
        if not form.is_valid():
            return Response(
                {name: [str(m) for m in ms] for name, ms in form.errors.items()},
                status=status.HTTP_400_BAD_REQUEST,
            )
        try:
            schedule = services.schedule_create(
                evaluation=evaluation, by=request.user, **form.cleaned_data
            )
        except NotAllowed as exc:
            raise PermissionDenied(str(exc)) from None
        except ValidationError as exc:
            errors = (
                exc.message_dict
                if hasattr(exc, "error_dict")
                else {"non_field_errors": exc.messages}
            )
            return Response(errors, status=status.HTTP_400_BAD_REQUEST)
        return Response(ScheduleSerializer(schedule).data, status=status.HTTP_201_CREATED)
