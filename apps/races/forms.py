from django import forms

from apps.connections.llm_routes import route_resolve
from apps.races.services import lanes_validate
from apps.runs.forms import RunForm


class ModelListWidget(forms.Widget):
    """The lanes' pickers (one ``agent_model`` select per lane, rendered by the template):
    the values picked, in lane order."""

    def value_from_datadict(self, data, files, name):
        return data.getlist(name) if hasattr(data, "getlist") else list(data.get(name) or [])


class AgentModelsField(forms.Field):
    """2–4 different agent models, each cleaned as the run form's agent model is (a
    :class:`~apps.connections.llm_routes.ResolvedRoute`)."""

    widget = ModelListWidget
    user = None  # set by the form: who may use which connection

    def clean(self, value):
        try:
            picked = lanes_validate(list(value or []))
        except forms.ValidationError as exc:
            raise forms.ValidationError(exc.message_dict["agent_model"]) from exc
        resolved, errors = [], []
        for text in picked:
            try:
                resolved.append(route_resolve(text, user=self.user))
            except ValueError as exc:
                errors.append(str(exc))
        if errors:
            raise forms.ValidationError(errors, code="invalid_model")
        return resolved


class RaceForm(RunForm):
    """A race: the run form's task, customer model, step limit and seed, and 2–4 agent
    models instead of one."""

    agent_model = AgentModelsField(label="Agent models")
    trial = None  # every lane is trial 0 of the seed
    judge_model = None  # the customer judges a race's lanes

    def __init__(self, *args, user=None, **kwargs):
        super().__init__(*args, user=user, **kwargs)
        self.fields["agent_model"].user = user
