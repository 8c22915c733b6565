"""Every page of the site with real content on it, for tests that visit them all (layout,
console errors): :func:`site_with_content` writes what the pages show — τ²'s longest
telecom task ids in a run, its fork, a play session, a race, evaluations, an API key, a
connection — and :meth:`Site.pages` lists each page's path filled with them.

The rows are written directly (no worker): a test that needs them committed uses
``committed_db`` (the ``alice`` fixture does), and the suite's clean-up deletes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: The telecom test tasks with the longest ids (~180 characters, no space), longest first.
LONG_TELECOM_IDS = (
    "[mms_issue]airplane_mode_on|bad_network_preference|bad_wifi_calling|break_apn_mms_setting"
    "|break_app_storage_permission|data_mode_off|data_usage_exceeded|unseat_sim_card"
    "|user_abroad_roaming_disabled_on[PERSONA:Easy]",
    "[mms_issue]airplane_mode_on|bad_network_preference|bad_wifi_calling|break_apn_mms_setting"
    "|break_app_sms_permission|data_mode_off|data_usage_exceeded|unseat_sim_card"
    "|user_abroad_roaming_disabled_on[PERSONA:None]",
)
LONG_MODEL = "deepseek-ai/DeepSeek-V4.1-Flash:novita"
CUSTOMER_MODEL = "deepseek-ai/DeepSeek-V4.1-Flash"


@dataclass(frozen=True)
class SitePage:
    """One page: ``path`` opened by ``who`` ("alice", or "nobody" for a page seen signed
    out)."""

    name: str
    path: str
    who: str = "alice"

    def __str__(self) -> str:
        return self.name


@dataclass
class Site:
    """What :func:`site_with_content` wrote."""

    longest: Any  # Task
    run: Any  # alice's completed model run of the longest task
    fork: Any  # its fork at message 1
    session: Any  # alice's open play session of the longest task
    race: Any  # a race whose lanes are the run and the session
    evaluation: Any  # a finished telecom evaluation over the long ids
    other_evaluation: Any  # another model's on the same tasks, beside it on compare
    connection: Any  # alice's OpenAI-compatible connection

    def pages(self) -> list[SitePage]:
        task = self.longest
        domain = task.domain_id
        a, b = self.evaluation.pk, self.other_evaluation.pk
        return [
            SitePage("explorer", f"/tasks/?domain=telecom&split=full&q={task.task_id[:40]}"),
            SitePage("explorer, all tasks", "/tasks/?domain=telecom&split=test"),
            SitePage("task page", task.get_absolute_url()),
            SitePage("domain policy page", f"/tasks/{domain}/"),
            SitePage("runs list", "/runs/"),
            SitePage("runs list, every kind", "/runs/?kind=all"),
            SitePage("runs list, evaluation runs", "/runs/?kind=evaluation"),
            SitePage("run page (run detail)", self.run.get_absolute_url()),
            SitePage("fork page (run detail)", self.fork.get_absolute_url()),
            SitePage("new run", f"/runs/new/?domain={domain}&task={task.task_id}"),
            SitePage("compare runs", f"/runs/compare/?ids={self.run.pk},{self.fork.pk}"),
            SitePage("fork form", f"/runs/{self.run.pk}/fork/?at=1"),
            SitePage("review queue", "/runs/review/"),
            SitePage("races list", "/races/"),
            SitePage("race page", self.race.get_absolute_url()),
            SitePage("new race", f"/races/new/?domain={domain}&task={task.task_id}"),
            SitePage("play index", "/play/"),
            SitePage("new play session", f"/play/new/?domain={domain}&task={task.task_id}"),
            SitePage("play session", f"/play/{self.session.pk}/"),
            SitePage("evaluations list", "/evaluations/"),
            SitePage("evaluation page", self.evaluation.get_absolute_url()),
            SitePage("new evaluation", "/evaluations/new/"),
            SitePage("compare evaluations", f"/evaluations/compare/?ids={a},{b}"),
            SitePage("import evaluation", "/evaluations/import/"),
            SitePage("schedules", "/schedules/"),
            SitePage("leaderboard", "/leaderboard/?domain=airline"),
            SitePage("submission", "/evaluations/submission/"),
            SitePage("models", "/models/"),
            SitePage("agents connect", "/agents/"),
            SitePage("API keys (profile)", "/accounts/keys/"),
            SitePage("agents playground", "/agents/playground/"),
            SitePage("connections", "/connections/"),
            SitePage("connection page", f"/connections/{self.connection.pk}/"),
            SitePage("new connection", "/connections/new/"),
            SitePage("edit connection", f"/connections/{self.connection.pk}/edit/"),
            SitePage("sign-in", "/accounts/sign-in/", who="nobody"),
        ]


def site_with_content(*, alice, llm) -> Site:
    """Write alice's share of every page (she is made staff, so the review pages and the
    auto-review forms are hers to see too); ``llm`` is the scripted server, whose router
    catalogue fills the model pickers and the models page."""
    from apps.agents.services import api_key_create
    from apps.races.models import Race, RaceLane
    from apps.runs.models import Run, RunEvent
    from apps.tasks.models import Task
    from tau2_env.engine import catalog
    from tests.support.connections import openai_compatible_connection
    from tests.support.evaluations import stored_evaluation
    from tests.support.scripts import refresh_agent_models

    alice.is_staff = True
    alice.save(update_fields=["is_staff"])
    refresh_agent_models()
    longest = Task.objects.get(domain_id="telecom", task_id=LONG_TELECOM_IDS[0])
    lines = [
        ("agent", {"role": "assistant", "content": f"About {longest.task_id}: how can I help?"}),
        ("customer", {"role": "user", "content": "My phone says " + "x" * 200}),
        ("agent", {"role": "assistant", "content": "Let me look at your line."}),
        ("customer", {"role": "user", "content": "###STOP###"}),
    ]
    common = {
        "task": longest,
        "domain": "telecom",
        "created_by": alice,
        "user_model": CUSTOMER_MODEL,
    }
    run = Run.objects.create(
        **common,
        agent_model=LONG_MODEL,
        status=Run.Status.COMPLETED,
        reward=1.0,
        reward_info={"reward": 1.0, "reward_basis": ["ENV_ASSERTION"], "info": {}},
        termination_reason="user_stop",
        n_messages=len(lines),
        prompt_tokens=12_345,
        completion_tokens=678,
        cost_usd="0.036000",
        seed=626729,
        given_seed=300,
    )
    fork = Run.objects.create(
        **common,
        agent_model=LONG_MODEL,
        status=Run.Status.COMPLETED,
        reward=0.0,
        reward_info={"reward": 0.0, "reward_basis": ["ENV_ASSERTION"], "info": {}},
        termination_reason="user_stop",
        n_messages=len(lines),
        parent=run,
        fork_seq=2,
    )
    for row in (run, fork):
        RunEvent.objects.bulk_create(
            RunEvent(run=row, seq=seq, kind=kind, message=message)
            for seq, (kind, message) in enumerate(lines)
        )
    session = Run.objects.create(
        **common,
        kind=Run.Kind.HUMAN,
        agent_model="a person",
        status=Run.Status.RUNNING,
        play_phase=Run.PlayPhase.YOUR_TURN,
        n_messages=1,
    )
    RunEvent.objects.create(
        run=session, seq=0, kind="agent", message={"role": "assistant", "content": "Hi!"}
    )
    race = Race.objects.create(created_by=alice, task=longest, user_model=CUSTOMER_MODEL, seed=300)
    lane_run = Run.objects.create(
        **common, agent_model=LONG_MODEL, status=Run.Status.COMPLETED, reward=1.0, n_messages=0
    )
    for position, lane in enumerate((lane_run, session)):
        RaceLane.objects.create(race=race, run=lane, position=position)
    evaluation = stored_evaluation(
        alice,
        domain="telecom",
        split="test",
        outcomes={LONG_TELECOM_IDS[0]: [1.0, 0.0], LONG_TELECOM_IDS[1]: [0.0, "failed"]},
        agent_model=LONG_MODEL,
        user_model=CUSTOMER_MODEL,
        cost_usd="0.036000",
    )
    other = stored_evaluation(
        alice,
        domain="telecom",
        split="test",
        outcomes={LONG_TELECOM_IDS[0]: [1.0, 1.0], LONG_TELECOM_IDS[1]: [1.0, 0.0]},
        agent_model="Qwen/Qwen3-32B:cerebras",
        user_model=CUSTOMER_MODEL,
    )
    # A whole split, so that the leaderboard and the submission page have a row.
    airline = catalog.get_domain("airline").splits["test"]
    stored_evaluation(
        alice,
        outcomes={t: [1.0, 0.0] for t in airline},
        agent_model=LONG_MODEL,
        user_model=CUSTOMER_MODEL,
    )
    api_key_create(user=alice, name="k" * 100)
    connection = openai_compatible_connection(
        llm, by=alice, name="Our vLLM: lab-8xh100-node-finetunes-eu-west-1 (shared)"
    )
    _schedule(alice, evaluation=evaluation, last=other)
    return Site(
        longest=longest,
        run=run,
        fork=fork,
        session=session,
        race=race,
        evaluation=evaluation,
        other_evaluation=other,
        connection=connection,
    )


def _schedule(alice, *, evaluation, last) -> None:
    """alice's schedule of ``evaluation``, long-named, whose last tick started ``last`` and
    whose latest refused in words (the schedules page and the evaluation's panel)."""
    from django.utils import timezone
    from django_celery_beat.models import CrontabSchedule, PeriodicTask

    from apps.schedules.models import EvaluationSchedule

    crontab = CrontabSchedule.objects.get_or_create(minute="30", hour="1", day_of_week="1-5")[0]
    task = PeriodicTask.objects.create(
        name=f"site schedule {evaluation.pk}", task="schedules.repeat", crontab=crontab
    )
    EvaluationSchedule.objects.create(
        owner=alice,
        source=evaluation,
        spec={},
        name=f"{LONG_MODEL} on telecom, weekday nights",
        preset="custom",
        cron="30 1 * * 1-5",
        periodic_task=task,
        last_run_at=timezone.now(),
        last_evaluation=last,
        last_error=f"alice may no longer start it: Agent model: {LONG_MODEL} is not offered "
        "by any provider on the router any more.",
    )
