"""Cron expressions as schedules take them: five fields, read by Celery's own parser (the
one beat uses), refused in words; presets; and the tick a moment belongs to.

Days follow Celery's ``crontab`` (what beat fires on): a day must match both the day of
the month and the day of the week, where classic cron takes either.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from celery.schedules import crontab

FIELDS = ("minute", "hour", "day of month", "month", "day of week")
PRESETS = {"nightly": "0 2 * * *", "weekly": "0 3 * * 1"}
PRESET_WORDS = {"nightly": "every day at 02:00", "weekly": "every Monday at 03:00"}
# A leap day's schedule fires once in four years: search that far back for a tick.
_DAYS_BACK = 4 * 366 + 1


class CronError(ValueError):
    """A cron expression refused; ``str()`` says why in words."""


@dataclass(frozen=True)
class Cron:
    """A valid five-field expression (``text``, spaces normalised) and Celery's schedule."""

    text: str
    schedule: crontab

    @property
    def fields(self) -> dict[str, str]:
        """The fields as ``django_celery_beat.models.CrontabSchedule`` names them."""
        minute, hour, day_of_month, month_of_year, day_of_week = self.text.split()
        return {
            "minute": minute,
            "hour": hour,
            "day_of_month": day_of_month,
            "month_of_year": month_of_year,
            "day_of_week": day_of_week,
        }


def cron_parse(text: str) -> Cron:
    """``text`` as a :class:`Cron`, or :class:`CronError` saying what is wrong: not five
    fields, a field Celery cannot read, no day in the next four years, or more often than once
    an hour (each tick starts a whole evaluation)."""
    parts = (text or "").split()
    if len(parts) != 5:
        raise CronError(
            "A schedule is five fields — minute, hour, day of month, month, day of week — "
            f'e.g. "0 2 * * *" for every day at 02:00; "{" ".join(parts)}" has {len(parts)}.'
        )
    minute, hour, day_of_month, month, day_of_week = parts
    try:
        schedule = crontab(
            minute=minute,
            hour=hour,
            day_of_month=day_of_month,
            month_of_year=month,
            day_of_week=day_of_week,
        )
    except (ValueError, TypeError, IndexError) as exc:
        reason = str(exc).rstrip(".")
        raise CronError(f'"{" ".join(parts)}" is not a cron expression: {reason}.') from None
    if len(schedule.minute) != 1:
        raise CronError(
            f'"{" ".join(parts)}" fires more than once an hour; each tick starts a whole '
            "evaluation, so give one minute (e.g. 0)."
        )
    cron = Cron(text=" ".join(parts), schedule=schedule)
    # Days must match both fields (Celery's rule): Feb 29 on a Monday comes once in 28 years.
    if cron_last_tick(cron, datetime.now() + timedelta(days=_DAYS_BACK)) is None:
        raise CronError(f'"{cron.text}" does not fire in the next four years.')
    return cron


def _day_matches(schedule: crontab, day: datetime) -> bool:
    return (
        day.month in schedule.month_of_year
        and day.day in schedule.day_of_month
        # Celery numbers the days of the week from Sunday = 0.
        and (day.isoweekday() % 7) in schedule.day_of_week
    )


def cron_last_tick(cron: Cron, at: datetime) -> datetime | None:
    """The latest moment at or before ``at`` (to the minute, in ``at``'s time zone) that
    ``cron`` fires: the tick a message sent for it belongs to, however late it arrives.
    None if it never fired in the four years before."""
    schedule = cron.schedule
    at = at.replace(second=0, microsecond=0)
    minute = min(schedule.minute)
    for back in range(_DAYS_BACK):
        day = at - timedelta(days=back)
        if not _day_matches(schedule, day):
            continue
        hours = [h for h in schedule.hour if back or (h, minute) <= (at.hour, at.minute)]
        if hours:
            return day.replace(hour=max(hours), minute=minute)
    return None


def cron_describe(text: str) -> str:
    """Words for ``text``: a preset's, else the expression itself."""
    for name, preset in PRESETS.items():
        if preset == text:
            return PRESET_WORDS[name]
    return f"cron {text}"
