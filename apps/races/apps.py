from django.apps import AppConfig
from django.db.models import Q

from apps.runs.groups import RunGroup, run_group_register


class RacesConfig(AppConfig):
    name = "apps.races"
    label = "races"

    def ready(self) -> None:
        # A race's lanes are ordinary runs; the runs app knows nothing of races, so we
        # tell its history which runs are lanes.
        run_group_register(
            RunGroup(
                name="race",
                label="race runs",
                runs=Q(race_lane__isnull=False),
                related=("race_lane",),
            )
        )
