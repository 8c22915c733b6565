"""The CI gate (``tau2-gate``, ``tau2_env.faces.ci_gate``) end to end: run as a
subprocess, as a CI job runs it, against the live server (the real ASGI application)
with the session's Celery worker playing the runs against the scripted LLM.

alice has a studio key that may read and start. Each evaluation is airline 27 and 2 ×
1 trial: a customer whose flight was delayed asks for compensation. τ² 0.2 expects the
agent to send them a certificate ($150 and $50); τ² 1.0.1 expects none (neither customer
changes or cancels a reservation, so a certificate is a write the task does not expect).
The scripted agent either solves both (``expert``: it looks the customer up and does what
the installed τ² expects) or neither (``mistaken``: it does the other thing), so a later
evaluation is told apart from a pinned baseline by the paired bootstrap.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from apps.agents.models import ApiKey
from apps.agents.services import api_key_create, api_key_revoke
from apps.evaluations.models import Baseline, Evaluation
from tau2_env.generations import tau2_generation
from tests.support.ci_gate import gate, pin
from tests.support.llm_server import RecordedRequest, ScriptedLLM, text, tool_call
from tests.support.scripts import AGENT_MODEL, is_agent_request

ROOT = Path(__file__).resolve().parents[2]
# Who each task's customer is, and the certificate τ² 0.2's task sends them.
CERTIFICATES = {"ethan_martin_2396": 150, "noah_muller_9847": 50}  # airline 27, 2
# Whether the installed τ²'s airline 27 and 2 expect that certificate (0.2) or none (1.x).
CERTIFICATE_DUE = tau2_generation() == "0.2"
SENT = "I have sent you a certificate. Anything else?"
REFUSED = "Sorry, I cannot give you a certificate."


def _last(request: RecordedRequest) -> str:
    return str((request.messages[-1] if request.messages else {}).get("content") or "")


def _agent(llm: ScriptedLLM, *, certificate: bool) -> None:
    """The customer names themselves (their id is in the task's scenario, which the
    customer's prompt carries); the agent looks them up, then sends the task's
    certificate (``certificate``) or says it will not. Stateless: each reply follows
    from the request."""

    def responder(request: RecordedRequest):
        said = request.text()
        user = next((u for u in CERTIFICATES if u in said), None)
        if is_agent_request(request):
            called = [
                call["function"]["name"]
                for message in request.messages
                if message.get("role") == "assistant"
                for call in message.get("tool_calls") or []
            ]
            if user is None:
                return text("May I have your user id?")
            if "get_user_details" not in called:
                return tool_call("get_user_details", user_id=user)
            if not certificate:
                return text(REFUSED)
            if "send_certificate" not in called:
                return tool_call("send_certificate", user_id=user, amount=CERTIFICATES[user])
            return text(SENT)
        if any(closing in _last(request) for closing in (SENT, REFUSED)):
            return text("Thanks, that's all. ###STOP###")
        return text(f"Hi, my flight was delayed and I want compensation. I'm {user}.")

    llm.responder = responder


def expert(llm: ScriptedLLM) -> None:
    """Solves airline 27 and 2 on either τ²: sends the certificate where it is due (0.2),
    refuses it where it is not (1.x)."""
    _agent(llm, certificate=CERTIFICATE_DUE)


def mistaken(llm: ScriptedLLM) -> None:
    """Solves neither on either τ²: refuses the certificate 0.2 expects, sends the one
    1.x does not."""
    _agent(llm, certificate=not CERTIFICATE_DUE)


@pytest.fixture
def settings_file(tmp_path, asgi_server) -> Path:
    path = tmp_path / "eval.toml"
    path.write_text(
        f'server = "{asgi_server.url}"\n'
        "timeout_minutes = 3\n\n"
        "[evaluation]\n"
        'domain = "airline"\n'
        'split = "test"\n'
        'task_ids = ["27", "2"]\n'
        "num_trials = 1\n"
        f'agent_model = "{AGENT_MODEL}"\n'
        'name = "ci"\n'
    )
    return path


def key_of(user, scope: str = ApiKey.Scope.START) -> str:
    return api_key_create(user=user, name=f"ci {scope}", scope=scope)[1]


def test_an_evaluation_worse_than_the_pinned_baseline_fails_the_build(
    celery_worker, asgi_server, llm_server, alice, settings_file
):
    key = key_of(alice)
    expert(llm_server)

    first = gate(settings_file, key=key, run_id="100")

    assert first.returncode == 0, first.stdout + first.stderr
    assert "pass^1 = 1.000" in first.stdout
    assert "No verdict: No baseline is pinned for airline yet." in first.stdout
    baseline = Evaluation.objects.get()
    assert baseline.created_by == alice and baseline.status == "completed"
    assert "runs ended" in first.stdout  # the progress line
    assert pin(asgi_server, baseline.pk, key=key)["is_baseline"] is True

    mistaken(llm_server)
    second = gate(settings_file, key=key, run_id="101")

    assert second.returncode == 1, second.stdout + second.stderr
    assert "pass^1 = 0.000" in second.stdout
    assert "Verdict: WORSE" in second.stdout
    assert f"Worse than the baseline (evaluation {baseline.pk})" in second.stdout
    assert "Passed in the baseline, failed now: 27, 2" in second.stdout
    assert Evaluation.objects.count() == 2 and Baseline.objects.get().evaluation == baseline


def test_an_evaluation_better_than_the_baseline_passes_and_a_rerun_starts_nothing(
    celery_worker, asgi_server, llm_server, alice, settings_file
):
    key = key_of(alice)
    mistaken(llm_server)
    assert gate(settings_file, key=key, run_id="200").returncode == 0
    pin(asgi_server, Evaluation.objects.get().pk, key=key)

    expert(llm_server)
    pr = ("--set", "name=pr-7")  # a field of the file set for one build
    better = gate(settings_file, key=key, run_id="201", extra=pr)
    again = gate(settings_file, key=key, run_id="201", extra=pr)  # the job run again

    assert better.returncode == 0, better.stdout + better.stderr
    assert "Verdict: BETTER" in better.stdout
    assert "Failed in the baseline, passed now: 27, 2" in better.stdout
    assert "Cost per run:" in better.stdout
    assert again.returncode == 0 and "already started by this run id" in again.stdout
    assert Evaluation.objects.count() == 2 and Evaluation.objects.filter(name="pr-7").exists()


def test_a_refused_key_or_a_read_only_one_is_an_error_saying_why(asgi_server, alice, settings_file):
    old, revoked = api_key_create(user=alice, name="old", scope=ApiKey.Scope.START)
    api_key_revoke(user=alice, pk=old.pk)

    bad = gate(settings_file, key="tau2s_not-a-key")
    gone = gate(settings_file, key=revoked)
    read_only = gate(settings_file, key=key_of(alice, ApiKey.Scope.READ))

    for result in (bad, gone):
        assert result.returncode == 2, result.stdout + result.stderr
        assert "the studio refused the key (TAU2_STUDIO_KEY): unknown or revoked" in result.stderr
    assert read_only.returncode == 2 and "may only read" in read_only.stderr
    assert not Evaluation.objects.exists()


def test_a_bad_settings_file_or_no_key_is_an_error_before_anything_is_sent(tmp_path, committed_db):
    holds_key = tmp_path / "key.toml"
    holds_key.write_text(
        'server = "http://127.0.0.1:9"\nkey = "tau2s_x"\n[evaluation]\ndomain = "airline"\n'
    )
    broken = tmp_path / "broken.json"
    broken.write_text('{"server": ')
    no_model = tmp_path / "no_model.toml"
    no_model.write_text('server = "http://127.0.0.1:9"\n[evaluation]\ndomain = "airline"\n')

    assert "keys never go in the file" in gate(holds_key, key="k").stderr
    assert "is not valid JSON" in gate(broken, key="k").stderr
    assert "[evaluation] needs agent_model" in gate(no_model, key="k").stderr
    assert "cannot read the settings file" in gate(tmp_path / "missing.toml", key="k").stderr
    valid = tmp_path / "valid.toml"
    valid.write_text(
        'server = "http://127.0.0.1:9"\n[evaluation]\ndomain = "airline"\nagent_model = "a/b"\n'
    )
    no_key = gate(valid, key="")
    assert no_key.returncode == 2 and "no key: set TAU2_STUDIO_KEY" in no_key.stderr
    for path in (holds_key, broken, no_model):
        assert gate(path, key="k").returncode == 2


def test_the_gate_ships_as_a_console_script_that_imports_no_django():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["tau2-gate"] == "tau2_env.faces.ci_gate:main"
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, tau2_env.faces.ci_gate as gate; "
            "assert callable(gate.main); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('django', 'apps', 'tau2site', 'tau2', 'litellm')))",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.strip() == "[]"


def test_the_install_puts_the_tau2_gate_command_beside_python():
    # `make install` (pip install -e ".[pypi]") writes the console script into the venv's bin.
    script = Path(sys.executable).with_name("tau2-gate")
    assert script.exists(), f"{script} missing: pip did not install the console script"
    shown = subprocess.run(
        [str(script), "--help"], capture_output=True, text=True, check=True, timeout=60
    )
    assert shown.stdout.startswith("usage: tau2-gate")
