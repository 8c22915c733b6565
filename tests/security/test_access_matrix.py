"""Who gets what, on every URL and every WebSocket of the project.

The URLs come from the URLconf itself: a URL pattern the matrix does not list fails the
suite, so a new page cannot escape it. alice owns the work (a running model run, an open
play session, an evaluation); charlie is anonymous, bob another member, stella staff.

An answer is a status (``"200"``), or a redirect to where it leads (``"302 /runs/"``,
``"302 signin"`` for the sign-in page with its reason). GET and POST are both asked; a
POST carries an empty form.
"""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.test import Client

from tests.support.people import signed_in
from tests.support.urlconf import Route, fill, routes, websocket_routes
from tests.support.websockets import WebsocketCommunicator, session_headers

pytestmark = pytest.mark.slow  # some 130 URLs × GET and POST × three people

PEOPLE = ("anonymous", "bob", "staff")
SIGNIN = "302 signin"  # the sign-in page, saying why, then back
LIVENESS = "200 or 503"  # /health/workers: as the workers are, the same for everyone
ADMIN_LOGIN = "302 /admin/login/"


def same(answer: str) -> tuple[str, str, str]:
    return (answer, answer, answer)


# route -> {"GET": (anonymous, bob, staff), "POST": (...)}.
MATRIX: dict[str, dict[str, tuple[str, str, str]]] = {
    "": {"GET": same("302 /tasks/"), "POST": same("302 /tasks/")},
    "favicon.ico": {
        "GET": same("302 /static/favicon.svg"),
        "POST": same("302 /static/favicon.svg"),
    },
    # The catalogue is public.
    "tasks/": {"GET": same("200"), "POST": same("200")},
    "tasks/<slug:domain>/": {"GET": same("200"), "POST": same("200")},
    "tasks/<slug:domain>/<path:task_id>/": {"GET": same("200"), "POST": same("200")},
    # Runs: the team sees them; only who started a run, or staff, stops it.
    "runs/": {"GET": (SIGNIN, "200", "200"), "POST": (SIGNIN, "200", "200")},
    "runs/new/": {"GET": (SIGNIN, "200", "200"), "POST": (SIGNIN, "200", "200")},
    "runs/new/tasks/": {"GET": same("200"), "POST": same("200")},
    "runs/compare/": {
        "GET": ("403", "302 /runs/", "302 /runs/"),
        "POST": ("403", "302 /runs/", "302 /runs/"),
    },
    "runs/review/": {"GET": (SIGNIN, "403", "200"), "POST": (SIGNIN, "403", "200")},
    "runs/<int:pk>/": {"GET": ("403", "200", "200"), "POST": ("403", "200", "200")},
    "runs/<int:pk>.json": {"GET": ("403", "200", "200"), "POST": ("403", "200", "200")},
    "runs/<int:pk>/stop/": {"GET": same("405"), "POST": ("403", "403", "302 /runs/{run}/")},
    "runs/<int:pk>/rerun/": {
        "GET": same("405"),
        "POST": ("403", "302 /runs/new/", "302 /runs/new/"),
    },
    # A fork needs who may start runs, and a message to fork at (none given here: 400).
    "runs/<int:pk>/fork/": {"GET": (SIGNIN, "400", "400"), "POST": (SIGNIN, "400", "400")},
    "runs/<int:pk>/labels/": {
        "GET": same("405"),
        "POST": ("403", "403", "302 /runs/{run}/"),
    },
    "runs/<int:pk>/labels/slot/": {"GET": ("403", "404", "404"), "POST": same("405")},
    "runs/<int:pk>/labels/<int:label_pk>/delete/": {
        "GET": same("405"),
        "POST": ("403", "403", "302 /runs/{run}/"),
    },
    # Review by an LLM: staff start it (an empty form: back with its error); reviewers
    # decide on a finding (a person's label is none: back with that said).
    "runs/<int:pk>/autoreview/": {"GET": same("405"), "POST": ("403", "403", "302 /runs/{run}/")},
    "runs/autoreview/evaluations/<int:pk>/": {
        "GET": same("405"),
        "POST": ("403", "403", "302 /evaluations/{evaluation}/"),
    },
    "runs/autoreview/evaluations/<int:pk>/stop/": {
        "GET": same("405"),
        "POST": ("403", "403", "302 /evaluations/{evaluation}/"),
    },
    "runs/<int:pk>/labels/<int:label_pk>/accept/": {
        "GET": same("405"),
        "POST": ("403", "403", "302 /runs/{run}/"),
    },
    "runs/<int:pk>/labels/<int:label_pk>/dismiss/": {
        "GET": same("405"),
        "POST": ("403", "403", "302 /runs/{run}/"),
    },
    "runs/<int:pk>/labels/<int:label_pk>/edit/": {
        "GET": same("405"),
        "POST": ("403", "403", "302 /runs/{run}/"),
    },
    # Races: who may start runs starts one (an empty form: 200 with its errors); who may
    # see runs watches one (its lanes stream over each run's own /ws/runs/<id>/).
    "races/": {"GET": (SIGNIN, "200", "200"), "POST": same("405")},
    "races/new/": {"GET": (SIGNIN, "200", "200"), "POST": (SIGNIN, "200", "200")},
    "races/<int:pk>/": {"GET": ("403", "200", "200"), "POST": same("405")},
    "races/<int:pk>/lanes/": {"GET": ("403", "200", "200"), "POST": same("405")},
    # Play: only the player acts in a session; the others follow it on the run page.
    "play/": {"GET": (SIGNIN, "200", "200"), "POST": (SIGNIN, "200", "200")},
    "play/new/": {"GET": (SIGNIN, "200", "200"), "POST": (SIGNIN, "200", "200")},
    "play/<int:pk>/": {
        "GET": (SIGNIN, "302 /runs/{play}/", "302 /runs/{play}/"),
        "POST": (SIGNIN, "302 /runs/{play}/", "302 /runs/{play}/"),
    },
    "play/<int:pk>/state/": {"GET": (SIGNIN, "403", "403"), "POST": (SIGNIN, "403", "403")},
    "play/<int:pk>/say/": {"GET": same("405"), "POST": (SIGNIN, "403", "403")},
    "play/<int:pk>/tool/": {"GET": same("405"), "POST": (SIGNIN, "403", "403")},
    "play/<int:pk>/end/": {"GET": same("405"), "POST": (SIGNIN, "403", "403")},
    "play/<int:pk>/retry/": {"GET": same("405"), "POST": (SIGNIN, "403", "403")},
    # Evaluations: the team sees them; their starter, or staff, controls them.
    # An empty POST is a refused start: the form again, with its reasons (400).
    "evaluations/new/": {"GET": (SIGNIN, "200", "200"), "POST": (SIGNIN, "400", "400")},
    "evaluations/<int:pk>/": {"GET": (SIGNIN, "200", "200"), "POST": (SIGNIN, "200", "200")},
    "evaluations/<int:pk>/state/": {"GET": ("403", "200", "200"), "POST": ("403", "200", "200")},
    **{
        f"evaluations/<int:pk>/{action}/": {
            "GET": same("405"),
            "POST": (SIGNIN, "403", "302 /evaluations/{evaluation}/"),
        }
        for action in ("pause", "resume", "stop", "retry", "baseline")
    },
    # A re-grade is a new evaluation of whoever may start one (alice's is on this task set
    # already: refused, back to its page saying why).
    "evaluations/<int:pk>/regrade/": {
        "GET": same("405"),
        "POST": (SIGNIN, "302 /evaluations/{evaluation}/", "302 /evaluations/{evaluation}/"),
    },
    "evaluations/": {"GET": (SIGNIN, "200", "200"), "POST": (SIGNIN, "200", "200")},
    "evaluations/<int:pk>.json": {"GET": ("403", "200", "200"), "POST": ("403", "200", "200")},
    "evaluations/<int:pk>.csv": {"GET": ("403", "200", "200"), "POST": ("403", "200", "200")},
    "evaluations/import/": {"GET": (SIGNIN, "200", "200"), "POST": (SIGNIN, "200", "200")},
    # An import's or a check's job page: only who asked for it (alice) sees it; anyone
    # else, staff too, is told there is no such job.
    "evaluations/jobs/<int:pk>/": {"GET": same("404"), "POST": same("405")},
    "evaluations/compare/": {"GET": ("403", "400", "400"), "POST": ("403", "400", "400")},
    # A leaderboard submission: signed-in people, from evaluations they may submit (an
    # empty POST, with nothing submittable chosen, is refused: 400).
    "evaluations/submission/": {"GET": (SIGNIN, "200", "200"), "POST": (SIGNIN, "400", "400")},
    "leaderboard/": {"GET": (SIGNIN, "200", "200"), "POST": (SIGNIN, "200", "200")},
    # Whether a worker is alive, for anyone (a probe signs in nowhere): 200, or 503 if none.
    "health/workers": {"GET": same(LIVENESS), "POST": same("405")},
    # The JSON API: public catalogue, team-only evaluations, read-only.
    "api/schema/": {"GET": same("200"), "POST": same("405")},
    "api/docs/": {"GET": same("200"), "POST": same("405")},
    "api/domains/": {"GET": same("200"), "POST": same("405")},
    "api/domains/<slug:domain>/": {"GET": same("200"), "POST": same("405")},
    "api/tasks/": {"GET": same("200"), "POST": same("405")},
    "api/tasks/<slug:domain>/<path:task_id>/": {"GET": same("200"), "POST": same("405")},
    # A POST starts an evaluation (an empty body: the form's messages); its controls are
    # for its starter (alice) or staff, as the page's buttons.
    "api/evaluations/": {"GET": ("403", "200", "200"), "POST": ("403", "400", "400")},
    "api/evaluations/<int:pk>/": {"GET": ("403", "200", "200"), "POST": ("403", "405", "405")},
    **{
        f"api/evaluations/<int:pk>/{action}/": {
            "GET": ("403", "405", "405"),
            "POST": ("403", "403", "200"),
        }
        for action in ("pause", "resume", "stop", "retry", "baseline")
    },
    # Repeating an evaluation on a schedule: whoever may start (an empty body: 400).
    "api/evaluations/<int:pk>/schedule/": {
        "GET": ("403", "405", "405"),
        "POST": ("403", "400", "400"),
    },
    "api/models/": {"GET": same("200"), "POST": same("405")},
    # Sign-in and out.
    "accounts/sign-in/": {"GET": same("200"), "POST": same("405")},
    "accounts/sign-out/": {"GET": same("405"), "POST": same("302 /tasks/")},
    "accounts/dev-login/": {"GET": same("404"), "POST": same("404")},
    # Studio API keys: one's own only (an empty name is refused; no one revokes another's).
    "accounts/keys/": {"GET": (SIGNIN, "200", "200"), "POST": (SIGNIN, "400", "400")},
    "accounts/keys/<int:pk>/revoke/": {
        "GET": (SIGNIN, "405", "405"),
        "POST": (SIGNIN, "404", "404"),
    },
    # Connect an agent is public; the playground plays on the person's own session.
    "agents/": {"GET": same("200"), "POST": same("200")},
    "agents/playground/": {"GET": (SIGNIN, "200", "200"), "POST": (SIGNIN, "200", "200")},
    # Connections: signed-in people only; one's personal connection (alice's here) is
    # nobody else's, staff included: 404, as if it did not exist.
    "connections/": {"GET": (SIGNIN, "200", "200"), "POST": (SIGNIN, "405", "405")},
    "connections/new/": {"GET": (SIGNIN, "200", "200"), "POST": (SIGNIN, "400", "400")},
    "connections/base-url/": {"GET": (SIGNIN, "200", "200"), "POST": (SIGNIN, "405", "405")},
    "connections/<int:pk>/": {"GET": (SIGNIN, "404", "404"), "POST": (SIGNIN, "405", "405")},
    "connections/<int:pk>/edit/": {"GET": (SIGNIN, "404", "404"), "POST": (SIGNIN, "404", "404")},
    "connections/<int:pk>/delete/": {
        "GET": (SIGNIN, "404", "404"),
        "POST": (SIGNIN, "404", "404"),
    },
    "connections/<int:pk>/test/": {"GET": (SIGNIN, "405", "405"), "POST": (SIGNIN, "404", "404")},
    # Notifications: signed-in people only; one's personal webhook (alice's here) is
    # nobody else's, staff included: 404, as if it did not exist.
    "notifications/": {"GET": (SIGNIN, "200", "200"), "POST": (SIGNIN, "405", "405")},
    "notifications/new/": {"GET": (SIGNIN, "200", "200"), "POST": (SIGNIN, "400", "400")},
    **{
        f"notifications/<int:pk>/{page}": {
            "GET": (SIGNIN, "404", "404"),
            "POST": (
                SIGNIN,
                "405" if page in ("", "log/") else "404",
                "405" if page in ("", "log/") else "404",
            ),
        }
        for page in ("", "edit/", "delete/", "log/")
    },
    **{
        route: {"GET": (SIGNIN, "405", "405"), "POST": (SIGNIN, "404", "404")}
        for route in (
            "notifications/<int:pk>/secret/",
            "notifications/<int:pk>/test/",
            "notifications/<int:pk>/deliveries/<int:delivery_pk>/redeliver/",
        )
    },
    # Schedules: for those who may start evaluations; alice's schedule is changed by her or
    # staff. An empty form repeats nothing: back to the evaluation's page, saying why.
    "schedules/": {"GET": (SIGNIN, "200", "200"), "POST": (SIGNIN, "405", "405")},
    "schedules/evaluations/<int:pk>/": {
        "GET": same("405"),
        "POST": (SIGNIN, "302 /evaluations/{evaluation}/", "302 /evaluations/{evaluation}/"),
    },
    "schedules/<int:pk>/": {"GET": (SIGNIN, "403", "200"), "POST": (SIGNIN, "403", "400")},
    **{
        f"schedules/<int:pk>/{action}/": {
            "GET": same("405"),
            "POST": (SIGNIN, "403", "302 /schedules/"),
        }
        for action in ("pause", "resume", "delete")
    },
    # Datasets: cut from the team's runs, so for those who see runs; a push to the Hub is
    # its owner's only (the id given names nobody's push: 404). The download of every
    # run: the work's evaluation has one finished run of the default mode (200).
    "datasets/": {"GET": (SIGNIN, "200", "200"), "POST": same("405")},
    "datasets/download/": {"GET": (SIGNIN, "200", "200"), "POST": same("405")},
    "datasets/push/": {"GET": same("405"), "POST": (SIGNIN, "400", "400")},
    "datasets/pushes/<int:pk>/": {"GET": same("404"), "POST": same("405")},
    # Training sessions: the team's, for those who see runs (the work holds none: 404).
    "training/": {"GET": (SIGNIN, "200", "200"), "POST": same("405")},
    "training/<int:pk>/": {"GET": (SIGNIN, "404", "404"), "POST": same("405")},
    "training/<int:pk>/live/": {"GET": ("403", "404", "404"), "POST": same("405")},
    "auth/login/<str:backend>/": {"GET": same("405"), "POST": same("302 {provider}")},
    "auth/complete/<str:backend>/": {"GET": same("400"), "POST": same("400")},
    "auth/idp-launch/<str:backend>/": {"GET": same("404"), "POST": same("405")},
    "auth/app-launch/<str:backend>/": {"GET": same("404"), "POST": same("405")},
    "auth/disconnect/<str:backend>/": {
        "GET": (SIGNIN, "405", "405"),
        "POST": (SIGNIN, "403", "403"),
    },
    "auth/disconnect/<str:backend>/<int:association_id>/": {
        "GET": (SIGNIN, "405", "405"),
        "POST": (SIGNIN, "403", "403"),
    },
    "admin/login/": {
        "GET": (SIGNIN, SIGNIN, "302 /admin/"),
        "POST": (SIGNIN, SIGNIN, "302 /admin/"),
    },
    # The model catalogue: public; staff refresh it.
    "models/": {"GET": same("200"), "POST": same("200")},
    "models/refresh/": {"GET": same("405"), "POST": ("403", "403", "302 /models/")},
    # The admin: staff only (stella is a superuser, as grant_staff makes staff).
    "admin/": {"GET": (ADMIN_LOGIN, ADMIN_LOGIN, "200")},
    "admin/logout/": {"GET": ("302 /admin/", "302 /admin/", "405")},
    "admin/password_change/": {"GET": (ADMIN_LOGIN, ADMIN_LOGIN, "200")},
    "admin/password_change/done/": {"GET": (ADMIN_LOGIN, ADMIN_LOGIN, "200")},
    "admin/autocomplete/": {"GET": (ADMIN_LOGIN, ADMIN_LOGIN, "403")},
    "admin/jsi18n/": {"GET": (ADMIN_LOGIN, ADMIN_LOGIN, "200")},
    "admin/r/<path:content_type_id>/<path:object_id>/": {
        "GET": (ADMIN_LOGIN, ADMIN_LOGIN, "302 http://testserver/runs/{run}/")
    },
    "admin/auth/user/<id>/password/": {"GET": (ADMIN_LOGIN, ADMIN_LOGIN, "200")},
    "admin/^(?P<app_label>auth|accounts|social_django|tasks|runs|inference|connections"
    "|notifications|django_celery_beat)/$": {"GET": (ADMIN_LOGIN, ADMIN_LOGIN, "200")},
    "admin/(?P<url>.*)$": {"GET": (ADMIN_LOGIN, ADMIN_LOGIN, "404")},
}

# Every model page of the admin (changelist, add, change, history, delete, and the bare
# object URL that redirects to change): staff only. Staff get in: the page, or the
# admin's own answer (403 where a model is read-only, back to /admin/ for no such row).
STAFF_IN = "staff get in"
ADMIN_MODEL_PAGES = {
    "": "200",
    "add/": STAFF_IN,
    "<path:object_id>/change/": STAFF_IN,
    "<path:object_id>/history/": STAFF_IN,
    "<path:object_id>/delete/": STAFF_IN,
    "<path:object_id>/": "302 /admin/",
}


def _admin_model(route: Route) -> tuple[str, str] | None:
    """``(model label, page suffix)`` of an admin model page, else ``None``."""
    parts = route.route.split("/")
    if route.regex or len(parts) < 4 or parts[0] != "admin":
        return None
    from django.apps import apps

    try:
        apps.get_model(parts[1], parts[2])
    except (LookupError, ValueError):
        return None
    suffix = "/".join(parts[3:])
    return (f"{parts[1]}.{parts[2]}", suffix) if suffix in ADMIN_MODEL_PAGES else None


def expectations(route: Route) -> dict[str, tuple[str, str, str]]:
    if route.route in MATRIX:
        return MATRIX[route.route]
    model = _admin_model(route)
    if model is None:
        raise AssertionError(f"{route.route} ({route.name}) is not in the access matrix")
    return {"GET": (ADMIN_LOGIN, ADMIN_LOGIN, ADMIN_MODEL_PAGES[model[1]])}


def test_every_url_of_the_urlconf_is_in_the_matrix():
    missing = []
    for route in routes():
        try:
            expectations(route)
        except AssertionError as exc:
            missing.append(str(exc))
    assert not missing, "\n".join(missing)
    assert not set(MATRIX) - {r.route for r in routes()}, "the matrix lists URLs that are gone"


@pytest.fixture
def provider(settings):
    """Sign-in pointed at the fake Hugging Face (no network)."""
    from tests.support.fake_hf import CLIENT_ID, CLIENT_SECRET, FakeHF

    server = FakeHF().start()
    settings.OPENID_PROVIDER_URL = server.url
    settings.SOCIAL_AUTH_HUGGINGFACE_KEY = CLIENT_ID
    settings.SOCIAL_AUTH_HUGGINGFACE_SECRET = CLIENT_SECRET
    yield server
    server.stop()


def _values(route: Route, work, alice) -> dict[str, str]:
    from apps.runs.models import ReviewLabel

    label = ReviewLabel.objects.create(
        run=work["run"],
        created_by=alice,
        category=ReviewLabel.Category.choices[0][0],
        severity=ReviewLabel.Severity.choices[0][0],
        note="x",
    )
    pk = work["run"].pk
    if route.route.startswith("play/"):
        pk = work["play"].pk
    elif "evaluations/" in route.route:
        pk = work["evaluation"].pk
    elif route.route.startswith("races/"):  # a race whose one lane is alice's run
        from apps.races.models import Race, RaceLane

        lane = RaceLane.objects.filter(run=work["run"]).first()
        if lane is None:
            race = Race.objects.create(
                created_by=alice, task=work["run"].task, user_model="u/m", seed=1
            )
            lane = RaceLane.objects.create(race=race, run=work["run"], position=0)
        pk = lane.race_id
    elif route.route.startswith("connections/"):  # alice's personal connection
        from apps.connections.services import ConnectionFields, connection_create

        pk = connection_create(
            by=alice,
            owner=alice,
            kind="openai_compatible",
            fields=ConnectionFields(name="matrix", base_url="http://x/v1"),
        ).pk
    elif route.route.startswith("notifications/"):  # alice's own webhook
        from apps.notifications.services import SubscriptionFields, subscription_create

        fields = SubscriptionFields(
            name="matrix", url="https://example.org/hook", events=["evaluation.finished"]
        )
        pk = subscription_create(by=alice, fields=fields)[0].pk
    elif route.route.startswith("schedules/<int:pk>/"):  # alice's schedule of her evaluation
        from django_celery_beat.models import CrontabSchedule, PeriodicTask

        from apps.schedules.models import EvaluationSchedule

        PeriodicTask.objects.filter(name__startswith="matrix ").delete()  # earlier routes'
        task = PeriodicTask.objects.create(
            name=f"matrix {route.route}",
            task="schedules.repeat",
            crontab=CrontabSchedule.objects.get_or_create(minute="0", hour="2")[0],
        )
        pk = EvaluationSchedule.objects.create(
            owner=alice,
            source=work["evaluation"],
            spec={},
            name="matrix",
            cron="0 2 * * *",
            periodic_task=task,
        ).pk
    elif route.route.startswith("accounts/keys/"):  # alice's own key: nobody else revokes it
        from apps.agents.services import api_key_create

        pk = api_key_create(user=alice, name="matrix")[0].pk
    object_id = str(alice.pk)
    model = _admin_model(route)
    if model is not None:
        from django.apps import apps

        first = apps.get_model(model[0]).objects.order_by("pk").first()
        object_id = str(first.pk) if first is not None else "1"
    from django.contrib.contenttypes.models import ContentType

    return {
        "pk": str(pk),
        "delivery_pk": "1",
        "label_pk": str(label.pk),
        "domain": "airline",
        "task_id": "27",
        "backend": "huggingface",
        "association_id": "1",
        "content_type_id": str(ContentType.objects.get_for_model(type(work["run"])).pk),
        "object_id": str(work["run"].pk) if route.route.startswith("admin/r/") else object_id,
        "id": str(alice.pk),
        "app_label": "runs",
        "url": "nowhere/",
    }


def _answer(response) -> str:
    if response.status_code in (301, 302):
        location = response["Location"]
        if location.startswith("/accounts/sign-in/?"):
            return SIGNIN
        return f"302 {location}"  # permanent or not
    return str(response.status_code)


def _matches(answer: str, expected: str, ids: dict[str, str]) -> bool:
    expected = expected.format(**ids)
    if expected == STAFF_IN:  # the admin let staff in: a page, or its own refusal
        return answer in ("200", "403", "302 /admin/")
    if expected == LIVENESS:
        return answer in ("200", "503")
    return answer == expected or (expected.startswith("302 ") and answer.startswith(expected))


@pytest.mark.parametrize("who", PEOPLE)
def test_each_person_gets_what_the_matrix_says_on_every_url(
    who, work, alice, bob, staff, provider, llm_server
):
    people = {"anonymous": None, "bob": bob, "staff": staff}
    ids = {
        "run": str(work["run"].pk),
        "play": str(work["play"].pk),
        "evaluation": str(work["evaluation"].pk),
        "provider": provider.url,
    }
    wrong = []
    for route in routes():
        expected = expectations(route)
        path = fill(route, _values(route, work, alice))
        for method, answers in expected.items():
            # A fresh client each time: signing out (or the admin's logout) ends nothing else.
            client = Client() if people[who] is None else signed_in(people[who])
            response = client.get(path) if method == "GET" else client.post(path, {})
            answer = _answer(response)
            want = answers[PEOPLE.index(who)]
            if not _matches(answer, want, ids):
                wrong.append(f"{method} {path} ({route.route}) as {who}: {answer}, not {want}")
    assert not wrong, "\n".join(wrong)


def test_bob_cannot_stop_alices_run_nor_see_its_stop_button_but_alice_and_staff_can(
    work, alice, bob, staff
):
    from apps.runs.models import Run

    run = work["run"]
    for person in (bob,):
        client = signed_in(person)
        assert 'data-testid="stop"' not in client.get(f"/runs/{run.pk}/").content.decode()
        assert client.post(f"/runs/{run.pk}/stop/").status_code == 403
        assert client.post(f"/runs/{work['play'].pk}/stop/").status_code == 403
    assert not Run.objects.filter(stop_requested=True).exists()
    for person in (alice, staff):
        client = signed_in(person)
        assert 'data-testid="stop"' in client.get(f"/runs/{run.pk}/").content.decode()
    assert signed_in(alice).post(f"/runs/{run.pk}/stop/").status_code == 302
    assert Run.objects.get(pk=run.pk).stop_requested
    other = Run.objects.create(
        task=run.task, domain="airline", created_by=alice, agent_model="o/m", user_model="u/m"
    )
    response = signed_in(staff).post(f"/runs/{other.pk}/stop/", HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and Run.objects.get(pk=other.pk).status == "stopped"


# --- WebSockets ---------------------------------------------------------------------------

# route -> (anonymous, bob, staff): does the socket open?
WEBSOCKETS = {
    "ws/runs/<int:pk>/": (False, True, True),
    "ws/evaluations/<int:pk>/": (False, True, True),
}


def test_every_websocket_route_is_in_the_matrix():
    assert {r.route for r in websocket_routes()} == set(WEBSOCKETS)


async def _opens(path: str, client, *, origin: bytes = b"http://testserver") -> bool:
    from tau2site.asgi import application

    socket = WebsocketCommunicator(
        application, path, headers=session_headers(client, origin=origin)
    )
    connected, _ = await socket.connect(timeout=10)
    await socket.disconnect()
    return connected


@pytest.mark.parametrize("who", PEOPLE)
def test_each_person_opens_the_websockets_the_matrix_says(who, work, bob, staff):
    client = {"anonymous": None, "bob": signed_in(bob), "staff": signed_in(staff)}[who]
    for route in websocket_routes():
        pk = work["evaluation"].pk if "evaluations" in route.route else work["run"].pk
        path = fill(route, {"pk": str(pk)})
        expected = WEBSOCKETS[route.route][PEOPLE.index(who)]
        assert async_to_sync(_opens)(path, client) is expected, (path, who)


def test_a_websocket_from_the_same_host_on_another_port_or_scheme_is_refused(work, bob):
    client = signed_in(bob)
    path = f"/ws/runs/{work['run'].pk}/"
    assert async_to_sync(_opens)(path, client, origin=b"http://testserver")
    for origin in (
        b"http://testserver:8001",
        b"https://testserver",
        b"http://evil.example",
        b"null",
    ):
        assert not async_to_sync(_opens)(path, client, origin=origin), origin
