"""The history's kind filter: single runs by default, evaluation runs one row per
evaluation, race lanes, agents' episodes and play sessions each under their own kind,
and every run linking to what it is part of (its evaluation, race or parent).

alice is signed in; her team's history holds a run, its fork, an evaluation of 40 runs
of which 34 were stopped before any call, a race, an agent's episode and a play session.
"""

from __future__ import annotations

import pytest

from apps.races.models import Race, RaceLane
from apps.runs.models import Run
from apps.runs.selectors import RunFilters, run_list
from apps.runs.templatetags.wrapping import breakable, name_parts
from apps.tasks.models import Task
from tau2_env.engine import catalog
from tests.support.evaluations import stored_evaluation


def _run(user, **fields) -> Run:
    task = Task.objects.get(domain_id="airline", task_id="27")
    defaults = {
        "task": task,
        "domain": "airline",
        "created_by": user,
        "agent_model": "org/model-a",
        "user_model": "u/m",
        "status": Run.Status.COMPLETED,
        "reward": 1.0,
    }
    return Run.objects.create(**{**defaults, **fields})


@pytest.fixture
def history(alice):
    single = _run(alice)
    fork = _run(alice, parent=single, fork_seq=2, reward=0.0)
    task_ids = list(catalog.get_domain("airline").splits["test"])
    assert len(task_ids) == 20
    evaluation = stored_evaluation(alice, outcomes={t: [1.0, 0.0] for t in task_ids})
    stopped = list(evaluation.runs.order_by("pk").values_list("pk", flat=True)[:34])
    Run.objects.filter(pk__in=stopped).update(status=Run.Status.STOPPED, reward=None)
    lane = _run(alice, agent_model="org/racer")
    race = Race.objects.create(created_by=alice, task=lane.task, user_model="u/m", seed=11)
    RaceLane.objects.create(race=race, run=lane, position=0)
    agent = _run(alice, kind=Run.Kind.AGENT, agent_model="my-rl-agent/0.3")
    session = _run(alice, kind=Run.Kind.HUMAN, agent_model="a person", reward=None)
    return {
        "single": single,
        "fork": fork,
        "evaluation": evaluation,
        "lane": lane,
        "race": race,
        "agent": agent,
        "session": session,
    }


def _listed(client, **params) -> tuple[set[int], str]:
    body = client.get("/runs/", params).content.decode()
    ids = set(Run.objects.values_list("pk", flat=True))
    return {pk for pk in ids if f'data-run-id="{pk}"' in body}, body


def test_the_history_shows_single_runs_and_their_forks_by_default(alice_client, history):
    listed, body = _listed(alice_client)
    assert listed == {history["single"].pk, history["fork"].pk}
    assert '<option value="single" selected>single runs</option>' in body
    # The fork names its parent and links to it.
    assert f'href="/runs/{history["single"].pk}/" title="Forked at message 2">fork of #' in body
    # Legacy links: kind=model was Run.Kind's value for model runs.
    assert _listed(alice_client, kind="model")[0] == listed
    assert _listed(alice_client, kind="nonsense")[0] == listed


def test_evaluation_runs_are_one_row_per_evaluation_with_its_counts(alice_client, history):
    evaluation = history["evaluation"]
    listed, body = _listed(alice_client, kind="evaluation")
    assert listed == set(), "no run row: the 40 runs are one evaluation's row"
    assert body.count('data-testid="evaluation-group"') == 1
    row = body.split(f'data-evaluation-id="{evaluation.pk}"')[1].split("</tr>")[0]
    assert f'href="/evaluations/{evaluation.pk}/"' in row
    assert f'href="?kind=evaluation&amp;evaluation={evaluation.pk}"' in row
    assert ">40 runs</a>" in row
    assert 'data-label="Completed" data-key="status">6<' in row
    assert 'data-label="Stopped" data-testid="group-stopped">34<' in row


def test_opening_an_evaluations_runs_lists_each_with_a_link_back(alice_client, history):
    evaluation = history["evaluation"]
    its = {"kind": "evaluation", "evaluation": str(evaluation.pk)}
    first, body = _listed(alice_client, **its)
    second, _ = _listed(alice_client, **its, page="2")
    assert len(first) == 30 and len(second) == 10  # 30 a page
    assert first | second == set(evaluation.runs.values_list("pk", flat=True))
    assert body.count(f'data-testid="of-evaluation" href="/evaluations/{evaluation.pk}/"') == 30
    assert 'data-testid="evaluation-runs-note"' in body
    # The pager keeps the evaluation.
    assert (
        f"evaluation={evaluation.pk}&amp;page=2" in body
        or f"evaluation={evaluation.pk}&page=2" in body
    )
    # Filters narrow the evaluation's runs too, and the grouped rows count only what
    # they keep.
    completed, _ = _listed(alice_client, **its, status="completed")
    assert len(completed) == 6
    _, grouped = _listed(alice_client, kind="evaluation", status="completed")
    assert ">6 runs</a>" in grouped


def test_race_agent_and_play_runs_each_have_their_kind(alice_client, history):
    lane, race = history["lane"], history["race"]
    listed, body = _listed(alice_client, kind="race")
    assert listed == {lane.pk}
    assert f'data-testid="of-race" href="/races/{race.pk}/"' in body
    assert _listed(alice_client, kind="agent")[0] == {history["agent"].pk}
    assert _listed(alice_client, kind="play")[0] == {history["session"].pk}
    assert _listed(alice_client, kind="human")[0] == {history["session"].pk}
    everything, body = _listed(alice_client, kind="all")
    newest = Run.objects.order_by("-created_at", "-id").values_list("pk", flat=True)[:30]
    assert everything == set(newest) and {lane.pk, history["session"].pk} <= everything
    assert f'data-testid="of-race" href="/races/{race.pk}/"' in body


def test_an_evaluation_run_and_a_lane_link_back_from_their_own_pages(alice_client, history):
    run = history["evaluation"].runs.order_by("-pk").first()
    body = alice_client.get(f"/runs/{run.pk}/").content.decode()
    link = f'href="/evaluations/{run.evaluation_id}/" data-testid="evaluation-of-run"'
    assert link in body and f"trial {run.trial} of evaluation #{run.evaluation_id}" in body
    lane_page = alice_client.get(f"/runs/{history['lane'].pk}/").content.decode()
    assert 'data-testid="race-of-run"' in lane_page
    assert 'data-testid="evaluation-of-run"' not in lane_page


def test_an_empty_kind_says_what_it_lacks(bob_client):
    _, body = _listed(bob_client, kind="race")
    assert "No race runs yet." in body
    _, body = _listed(bob_client, kind="evaluation")
    assert "No evaluation runs yet." in body
    _, body = _listed(bob_client)
    assert "No single runs yet." in body
    _, body = _listed(bob_client, kind="play", person="alice")
    assert "No play sessions yet with these filters." in body


def test_compare_and_other_readers_of_the_filters_see_every_kind(alice_client, history):
    """Only the history page defaults to single runs: compare holds a play session and an
    agent's episode beside a run, and RunFilters() is every kind."""
    ids = f"{history['session'].pk},{history['agent'].pk},{history['single'].pk}"
    assert alice_client.get(f"/runs/compare/?ids={ids}").status_code == 200
    assert run_list(filters=RunFilters()).count() == Run.objects.count()


def test_long_ids_may_wrap_after_their_separators_only():
    telecom = "[mms_issue]airplane_mode_on|bad_wifi_calling[PERSONA:Easy]"
    assert str(breakable(telecom)) == (
        "[mms_<wbr>issue]<wbr>airplane_<wbr>mode_<wbr>on|<wbr>bad_<wbr>wifi_<wbr>calling"
        "<wbr>[PERSONA:<wbr>Easy]<wbr>"
    )
    assert str(breakable("deepseek-ai/DeepSeek-V4.1")) == (
        "deepseek-<wbr>ai/<wbr>DeepSeek-<wbr>V4.<wbr>1"
    )
    assert (
        str(breakable("<b>x_y</b> & 'q'")) == "&lt;b&gt;x_<wbr>y&lt;/<wbr>b&gt; &amp; &#x27;q&#x27;"
    )
    assert str(breakable("completed")) == "completed" and str(breakable(None)) == ""


def test_a_breadcrumbs_id_breaks_between_its_names_only():
    telecom = "[mms_issue]airplane_mode_on|data_saver_mode_on[PERSONA:Easy]"
    part = '<span class="id-part">{}</span>'.format
    assert str(name_parts(telecom)) == "<wbr>".join(
        part(p)
        for p in ("[mms_issue]", "airplane_mode_on|", "data_saver_mode_on", "[PERSONA:Easy]")
    )
    assert str(name_parts("<b>|x")) == part("&lt;b&gt;|") + "<wbr>" + part("x")
    assert str(name_parts("27")) == part("27") and str(name_parts(None)) == ""
