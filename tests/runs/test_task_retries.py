"""How often the run task comes back: a fault up to 20 times, a wait for the person's other
runs on their own endpoints without limit (Celery reads ``retry(max_retries=None)`` as the
task's own limit, so the task's own is None and the fault's 20 is said where it retries)."""

from __future__ import annotations

from celery.exceptions import MaxRetriesExceededError

from apps.runs import lifecycle, runner, tasks


def _answers(monkeypatch, *statuses: str) -> list[int]:
    given = iter(statuses)
    seen: list[int] = []

    def run_execute(*, run_id: int, worker: str) -> str:
        seen.append(run_id)
        return next(given)

    monkeypatch.setattr(runner, "run_execute", run_execute)
    return seen


def test_a_run_waiting_for_its_persons_other_runs_is_asked_again_past_20_tries(
    monkeypatch, settings
):
    settings.TAU2_OWN_ENDPOINT_WAIT_SECONDS = 1
    seen = _answers(monkeypatch, lifecycle.WAIT, "completed")
    result = tasks.execute_run.apply(args=[7], retries=30, throw=False)
    assert result.state != "FAILURE", result.result
    assert seen == [7, 7]


def test_a_run_whose_infrastructure_keeps_failing_stops_after_20_retries(monkeypatch):
    _answers(monkeypatch, lifecycle.RETRY)
    result = tasks.execute_run.apply(args=[7], retries=21, throw=False)
    assert result.state == "FAILURE"
    assert isinstance(result.result, MaxRetriesExceededError)
