"""One way to pick things on every form that starts runs: the run form, a race, an
evaluation, play (and a fork's models). Each offers the one model picker for every model,
the customer's included; the one-task forms (run, race, play) the one task picker, whose
links lead back to the form they sit in; and each starts on the same defaults
(apps.runs.defaults: τ²'s step limit, 4 trials).

alice is a signed-in member with a Hugging Face token; charlie is anonymous.
"""

import re
from html import unescape

from django.test import override_settings
from tau2.config import DEFAULT_MAX_ERRORS, DEFAULT_MAX_STEPS

from apps.connections.picker import RouteField
from apps.runs import defaults
from apps.runs.forms import ForkForm, RunForm
from apps.runs.models import Run
from tau2_env.engine.evaluation import DEFAULT_SEED

FORMS = ("/runs/new/", "/races/new/", "/evaluations/new/", "/play/", "/play/new/")
ONE_TASK_FORMS = ("/runs/new/", "/races/new/", "/play/new/")


def select_of(html: str, name: str) -> str:
    found = re.search(rf'<select name="{name}"[^>]*>.*?</select>', html, re.S)
    assert found, f"no <select name={name!r}>"
    return found.group(0)


def selected(select: str) -> str | None:
    option = re.search(r'<option value="([^"]*)"[^>]*\bselected\b', select)
    return unescape(option.group(1)) if option else None


def input_value(html: str, name: str) -> str | None:
    field = re.search(rf'<input[^>]*name="{name}"[^>]*>', html)
    assert field, f"no <input name={name!r}>"
    value = re.search(r'value="([^"]*)"', field.group(0))
    return unescape(value.group(1)) if value else None


def picker_links(html: str) -> list[str]:
    return [unescape(h) for h in re.findall(r'<a href="([^"]+)" class="picker-task', html)]


def test_the_shared_defaults_are_tau2s_own_but_four_trials():
    assert defaults.MAX_STEPS == DEFAULT_MAX_STEPS == 200  # tau2 run --max-steps
    assert defaults.MAX_ERRORS == DEFAULT_MAX_ERRORS == 10  # --max-errors
    assert defaults.SEED == DEFAULT_SEED == 300  # --seed
    assert defaults.NUM_TRIALS == 4  # pass^1 … pass^4, as τ²'s leaderboard reports them


def test_every_form_offers_the_customer_picker_starting_on_the_servers_customer(alice_client):
    for path in FORMS:
        page = alice_client.get(path).content.decode()
        customer = select_of(page, "user_model")
        assert 'data-testid="customer-picker"' in customer, path
        assert 'class="model-search"' in page, path  # the picker's search box
        assert selected(customer) == defaults.customer_model(), path
    for form in (RunForm(user=None), ForkForm(user=None)):
        assert isinstance(form.fields["user_model"], RouteField)
        assert isinstance(form.fields["agent_model"], RouteField)


def test_every_form_starts_on_the_shared_step_limit_and_trials(alice_client):
    for path in FORMS:
        page = alice_client.get(path).content.decode()
        assert input_value(page, "max_steps") == "200", path
    evaluation = alice_client.get("/evaluations/new/").content.decode()
    assert input_value(evaluation, "num_trials") == "4"
    assert input_value(evaluation, "max_errors") == "10"
    assert input_value(evaluation, "seed") == "300"
    with override_settings(TAU2_RUN_MAX_STEPS=50):  # the server's cap wins where lower
        for path in FORMS:
            assert input_value(alice_client.get(path).content.decode(), "max_steps") == "50"


def test_run_race_and_play_share_the_task_picker_and_its_links_lead_back(alice_client):
    for path in ONE_TASK_FORMS:
        page = alice_client.get(path, {"domain": "telecom", "split": "base"}).content.decode()
        assert 'data-testid="picker-list"' in page, path
        assert f'hx-get="/runs/new/tasks/?form={path.replace("/", "%2F")}"' in page, path
        links = picker_links(page)
        assert links and all(link.startswith(f"{path}?") for link in links), path
        titles = re.findall(r'<span class="picker-title">([^<]*)</span>', page)
        # Telecom rows say what tells them apart, not τ²'s shared title.
        assert titles and not any(t.startswith("You mobile data") for t in titles)
        assert len(set(titles)) == len(titles)
        assert "css/pickers.css" in page


def test_the_pickers_list_answers_for_the_form_it_sits_in_and_no_other_site(alice_client):
    query = {"domain": "airline", "split": "test", "task_id": ""}
    play = alice_client.get("/runs/new/tasks/", {**query, "form": "/play/new/"})
    assert all(link.startswith("/play/new/?") for link in picker_links(play.content.decode()))
    for elsewhere in ("https://evil.example/", "//evil.example/x", "javascript:alert(1)", ""):
        page = alice_client.get("/runs/new/tasks/", {**query, "form": elsewhere})
        links = picker_links(page.content.decode())
        assert links and all(link.startswith("/runs/new/?") for link in links), elsewhere


def test_play_starts_the_picked_task_with_the_step_limit_given_or_the_shared_one(alice_client):
    given = alice_client.post(
        "/play/new/", {"domain": "airline", "split": "test", "task_id": "27", "max_steps": 30}
    )
    default = alice_client.post(
        "/play/new/", {"domain": "airline", "split": "base", "task_id": "27"}
    )
    assert given.status_code == default.status_code == 302
    first, second = Run.objects.filter(kind=Run.Kind.HUMAN).order_by("pk")
    assert (first.task.task_id, first.max_steps) == ("27", 30)
    assert second.max_steps == defaults.max_steps() == 200
    too_many = alice_client.post(
        "/play/new/", {"domain": "airline", "task_id": "27", "split": "base", "max_steps": 10**6}
    )
    assert too_many.status_code == 400 and Run.objects.filter(kind=Run.Kind.HUMAN).count() == 2


def test_plays_tool_form_opens_on_no_tool(alice_client):
    alice_client.post("/play/new/", {"domain": "airline", "split": "base", "task_id": "27"})
    run = Run.objects.get(kind=Run.Kind.HUMAN)
    page = alice_client.get(f"/play/{run.pk}/").content.decode()
    tools = re.search(r'<select id="tool-name".*?</select>', page, re.S).group(0)
    options = re.findall(r'<option value="([^"]*)"( selected)?>', tools)
    assert options[0] == ("", " selected")  # "Choose a tool…", not τ²'s first (book_reservation)
    assert [v for v, s in options if s] == [""]
    assert ("book_reservation", "") in options
