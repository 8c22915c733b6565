"""The form that makes or edits a schedule: a preset or a cron expression, and a name."""

from __future__ import annotations

from django import forms

from apps.schedules.crons import PRESET_WORDS, CronError, cron_parse
from apps.schedules.models import EvaluationSchedule


class ScheduleForm(forms.Form):
    preset = forms.ChoiceField(
        label="Repeat",
        choices=[
            *((name, f"{name} ({words})") for name, words in PRESET_WORDS.items()),
            (EvaluationSchedule.Preset.CUSTOM, "on a cron expression"),
        ],
        initial=EvaluationSchedule.Preset.NIGHTLY,
    )
    cron = forms.CharField(
        label="Cron expression",
        required=False,
        max_length=120,
        help_text="minute hour day-of-month month day-of-week, in the server's time zone: "
        'e.g. "30 1 * * 1-5" (01:30 on weekdays). At most once an hour.',
    )
    name = forms.CharField(label="Name", required=False, max_length=160)

    def clean(self):
        data = super().clean()
        if data.get("preset") == EvaluationSchedule.Preset.CUSTOM:
            try:
                data["cron"] = cron_parse(data.get("cron", "")).text
            except CronError as exc:
                self.add_error("cron", str(exc))
        return data
