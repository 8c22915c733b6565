"""A taubench.com submission of banking_knowledge (τ² 1.x) from alice's evaluation of all
97 tasks: ``submission.json`` carries the retrieval configuration the schema requires for
banking, the results file records it and its policy, and the folder passes τ² 1.0.1's own
``tau2 submit validate`` and ``tau2 submit verify-trajs``.

Every task is played through the engine with bm25 (the default) and the scripted
customer: a third greeted and left unsolved, the others by their expected actions (the
golden replays of ``tests/tau2_env/test_banking_golden.py``); τ² scores each. Four trials
of the same conversation, as the leaderboard asks for four.
"""

from __future__ import annotations

import io
import json
import zipfile

import pytest

from apps.evaluations.models import Evaluation
from apps.runs.models import Run
from tau2_env.engine import catalog
from tests.evaluations.test_submission import (
    DETAILS,
    assert_no_secret,
    base,
    leaderboard_evaluation,
    page,
    pass_hat,
    tau2_cli,
)
from tests.support.evaluations import conversation
from tests.support.jobs import followed

pytestmark = pytest.mark.upstream

DOMAIN = "banking_knowledge"
CONFIG = "bm25"


@pytest.mark.slow
def test_a_banking_submission_passes_tau2s_validate_and_verify_trajs(
    alice, alice_client, llm_server, tmp_path, held_jobs
):
    outcomes = {
        task_id: [conversation(llm_server, domain=DOMAIN, task_id=task_id, solve=i % 3 != 0)] * 4
        for i, task_id in enumerate(base(DOMAIN))
    }
    assert len(outcomes) == 97
    evaluation = leaderboard_evaluation(alice, domain=DOMAIN, outcomes=outcomes)
    Evaluation.objects.filter(pk=evaluation.pk).update(retrieval_config=CONFIG)
    Run.objects.filter(evaluation=evaluation).update(retrieval_config=CONFIG)

    response = alice_client.get(page(**{DOMAIN: evaluation.pk}))
    html = response.content.decode()
    assert response.status_code == 200
    assert f'<option value="{evaluation.pk}" selected>' in html
    assert 'data-testid="submission-refusals"' not in html, html[-6000:]
    today = evaluation.finished_at.date().isoformat()
    details = {
        **DETAILS,
        "tau2_bench_version": catalog.tau2_version(),
        "evaluation_date": today,
        "notes": "banking_knowledge with bm25.",
    }
    checked = alice_client.post(page(**{DOMAIN: evaluation.pk}), {**details, "action": "check"})
    job, html = followed(alice_client, checked, held_jobs)
    assert job.status == "done", job.error
    assert 'data-testid="check-validate" data-verdict="passed"' in html, html[-6000:]
    assert 'data-testid="check-verify-trajs" data-verdict="passed"' in html, html[-6000:]

    download = alice_client.post(page(**{DOMAIN: evaluation.pk}), {**details, "action": "download"})
    assert download.status_code == 200
    with zipfile.ZipFile(io.BytesIO(download.content)) as archive:
        archive.extractall(tmp_path)
        names = archive.namelist()
    assert_no_secret("\n".join(names))
    folder = tmp_path / "tau2-submission-orgagent-a"
    (trajectories,) = (folder / "trajectories").iterdir()
    assert trajectories.name == f"{DOMAIN}-evaluation-{evaluation.pk}.json"

    validate = tau2_cli("submit", "validate", folder.name, cwd=tmp_path)
    verify = tau2_cli("submit", "verify-trajs", f"{folder.name}/trajectories", cwd=tmp_path)
    print(validate.stdout, validate.stderr, verify.stdout, verify.stderr)  # the verdicts
    assert validate.returncode == 0, validate.stdout[-4000:] + validate.stderr[-4000:]
    assert "✅ Submission validation successful!" in validate.stdout, validate.stdout[-4000:]
    assert "✅ Submission metrics validation successful!" in validate.stdout
    assert verify.returncode == 0, verify.stdout[-4000:] + verify.stderr[-4000:]
    assert "🎉 All files passed all checks!" in verify.stdout
    assert verify.stdout.count("✅ Tasks validation") == 1
    assert verify.stdout.count("✅ Trial count validation") == 1

    # What the format needs for banking: its retrieval configuration, in both files.
    written = json.loads((folder / "submission.json").read_text())
    results = written["results"][DOMAIN]
    assert results["retrieval_config"] == CONFIG
    info = json.loads(trajectories.read_text())["info"]
    assert info["retrieval_config"] == CONFIG
    assert info["environment_info"]["policy"] == catalog.results_policy(DOMAIN, CONFIG)
    rewards = {t: [c.reward for c in talks] for t, talks in outcomes.items()}
    assert sum(r[0] == 1.0 for r in rewards.values()) == 64  # every solved one scored 1.0
    for k in (1, 2, 3, 4):
        assert results[f"pass_{k}"] == pytest.approx(pass_hat(rewards, k), abs=1e-9)
