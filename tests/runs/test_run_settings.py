"""A run's settings are columns with one default each (step and error limits, the seed
given and its trial, prices): nothing is read back out of ``provenance``. Runs made
before the columns get them from their provenance (migration runs.0008)."""

from __future__ import annotations

import importlib
from decimal import Decimal

import pytest
from django.apps import apps as django_apps

from apps.runs.models import DEFAULT_MAX_ERRORS, Run
from apps.runs.services import run_create
from apps.runs.spec import RunSpec, Side
from apps.tasks.models import Task
from tests.support.people import ALICE_TOKEN, person
from tests.support.scripts import AGENT_MODEL, GOLD_TASK

backfill = importlib.import_module("apps.runs.migrations.0008_run_settings")


@pytest.fixture
def alice(db):
    # Signed in with Hugging Face: a run on the router is refused before it is made without.
    return person("alice", ALICE_TOKEN)


@pytest.fixture
def task():
    return Task.objects.get(domain_id=GOLD_TASK[0], task_id=GOLD_TASK[1])


def test_the_error_limit_defaults_to_tau2s_own():
    from tau2.config import DEFAULT_MAX_ERRORS as TAU2_DEFAULT

    assert DEFAULT_MAX_ERRORS == TAU2_DEFAULT
    assert Run._meta.get_field("max_errors").default == TAU2_DEFAULT


def test_every_step_limit_defaults_to_tau2s_own():
    """Runs, races, evaluations and their services start where ``tau2 run`` does, as
    every form does (apps.runs.defaults)."""
    import inspect

    from tau2.config import DEFAULT_MAX_STEPS as TAU2_DEFAULT

    from apps.evaluations.models import Evaluation
    from apps.evaluations.services import evaluation_create
    from apps.races.models import Race
    from apps.races.services import race_create
    from apps.runs import defaults

    assert defaults.MAX_STEPS == TAU2_DEFAULT
    for model in (Run, Race, Evaluation):
        assert model._meta.get_field("max_steps").default == TAU2_DEFAULT, model
    # Every service takes one RunSpec, whose default is τ²'s.
    assert RunSpec(agent=Side("org/model")).max_steps == TAU2_DEFAULT
    for service in (run_create, race_create, evaluation_create):
        assert "spec" in inspect.signature(service).parameters


@pytest.mark.django_db
def test_a_new_run_keeps_its_settings_in_columns(alice, task):
    run = run_create(
        user=alice,
        task=task,
        spec=RunSpec(agent=Side(AGENT_MODEL), seed=7, max_errors=4),
        trial=2,
        agent_prices=(Decimal("0.27"), Decimal("1.1")),
    )
    run.refresh_from_db()
    assert (run.given_seed, run.seed_trial, run.max_errors) == (7, 2, 4)
    assert run.agent_prices == (Decimal("0.27"), Decimal("1.1"))
    assert run.user_prices is None and not run.user_prices_fixed
    # What running it again repeats comes from the columns, even with provenance gone.
    Run.objects.filter(pk=run.pk).update(provenance={})
    run.refresh_from_db()
    spec = run.spec
    assert (spec.seed, run.seed_trial, spec.max_errors) == (7, 2, 4)
    assert spec.agent == Side(AGENT_MODEL, None, {"temperature": 0.0})


@pytest.mark.django_db
def test_runs_made_before_the_columns_get_them_from_their_provenance(alice, task):
    old = Run.objects.create(
        task=task,
        domain=task.domain_id,
        created_by=alice,
        agent_model=AGENT_MODEL,
        user_model="org/customer",
        seed=626729,
        provenance={
            "args": {"seed": 300, "trial": 1, "max_errors": 5, "trial_seed": 626729},
            "agent_prices": ["0.27", "1.1"],
            "user_prices": None,  # looked up: the router picks, so unpriced
        },
    )
    bare = Run.objects.create(
        task=task,
        domain=task.domain_id,
        created_by=alice,
        agent_model="human",
        user_model="org/customer",
        seed=11,
        provenance={},
    )
    backfill.settings_from_provenance(django_apps, None)
    old.refresh_from_db()
    bare.refresh_from_db()
    assert (old.given_seed, old.seed_trial, old.max_errors) == (300, 1, 5)
    assert old.agent_prices == (Decimal("0.27"), Decimal("1.1"))
    assert old.user_prices_fixed and old.user_prices is None
    assert (bare.given_seed, bare.seed_trial, bare.max_errors) == (11, 0, DEFAULT_MAX_ERRORS)
    assert bare.agent_prices is None and not bare.user_prices_fixed
