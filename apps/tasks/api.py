"""Read-only JSON API for the catalogue, described by OpenAPI at /api/schema/."""

from __future__ import annotations

from django.urls import reverse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_field
from rest_framework import generics, serializers

from apps.tasks import selectors
from apps.tasks.models import Domain, Split, Task, Tool
from apps.tasks.selectors import TaskFilters


class SplitSerializer(serializers.ModelSerializer):
    class Meta:
        model = Split
        fields = ["name", "size"]


class ToolSerializer(serializers.ModelSerializer):
    class Meta:
        model = Tool
        fields = ["name", "requestor", "kind", "description", "schema"]


class DomainSerializer(serializers.ModelSerializer):
    splits = SplitSerializer(many=True, read_only=True)

    class Meta:
        model = Domain
        fields = ["name", "splits", "content_hash"]


class DomainDetailSerializer(DomainSerializer):
    tools = serializers.SerializerMethodField()

    class Meta(DomainSerializer.Meta):
        fields = [*DomainSerializer.Meta.fields, "policy", "tools"]

    @extend_schema_field(ToolSerializer(many=True))
    def get_tools(self, domain):
        return ToolSerializer(selectors.tool_list(domain=domain.name), many=True).data


class TaskSerializer(serializers.ModelSerializer):
    domain = serializers.CharField(source="domain_id")
    url = serializers.SerializerMethodField()

    class Meta:
        model = Task
        fields = [
            "domain",
            "task_id",
            "title",
            "reward_basis",
            "expected_calls",
            "changes_db",
            "url",
        ]

    @extend_schema_field(OpenApiTypes.URI)
    def get_url(self, task) -> str:
        path = reverse("api:task", kwargs={"domain": task.domain_id, "task_id": task.task_id})
        request = self.context.get("request")
        return request.build_absolute_uri(path) if request else path


class TaskDetailSerializer(TaskSerializer):
    splits = serializers.SerializerMethodField()

    class Meta(TaskSerializer.Meta):
        fields = [
            *TaskSerializer.Meta.fields,
            "splits",
            "purpose",
            "reason_for_call",
            "known_info",
            "unknown_info",
            "task_instructions",
            "persona",
            "ticket",
            "tool_names",
            "evaluation_criteria",
            "raw",
        ]

    def get_splits(self, task) -> list[str]:
        return task.split_names


class DomainList(generics.ListAPIView):
    """Every τ²-bench domain with its splits."""

    serializer_class = DomainSerializer
    pagination_class = None

    def get_queryset(self):
        return selectors.domain_list()


class DomainDetail(generics.RetrieveAPIView):
    """One domain: its policy (markdown), splits and tools with their JSON schemas."""

    serializer_class = DomainDetailSerializer

    def get_object(self):
        return selectors.domain_get(name=self.kwargs["domain"])


@extend_schema(
    parameters=[
        OpenApiParameter("domain", str, description="Domain (default: TAU2_DOMAIN)."),
        OpenApiParameter("split", str, description="Split (default: TAU2_SPLIT)."),
        OpenApiParameter("q", str, description="Words to find in title, reason, id, tools."),
        OpenApiParameter(
            "kind",
            str,
            enum=["write", "read"],
            description="write: changes the database; read: read-only.",
        ),
    ]
)
class TaskList(generics.ListAPIView):
    """Tasks of a domain and split, with the explorer's search and filters."""

    serializer_class = TaskSerializer

    def get_queryset(self):
        filters = TaskFilters.from_params(self.request.query_params)
        return selectors.task_card_fields(selectors.task_list(filters=filters))


class TaskDetail(generics.RetrieveAPIView):
    """One task with everything the agent never sees and how it is scored."""

    serializer_class = TaskDetailSerializer

    def get_object(self):
        return selectors.task_get(domain=self.kwargs["domain"], task_id=self.kwargs["task_id"])
