import pytest
from django.core.management import call_command

from apps.tasks.models import CatalogueLoad, Domain, Split, Task, Tool
from apps.tasks.services import catalogue_load
from tau2_env.engine import catalog
from tau2_env.generations import tau2_generation

# What differs between τ² 0.2's data and 1.0.1's: mock has one more task, and retail is
# judged on NL assertions where 0.2 checked what the agent communicated.
MOCK_TASKS = 9 if tau2_generation() == "0.2" else 10
RETAIL_BASIS = ["DB", "COMMUNICATE"] if tau2_generation() == "0.2" else ["DB", "NL_ASSERTION"]

pytestmark = pytest.mark.django_db

EXPECTED_COUNTS = {
    ("airline", "train"): 30,
    ("airline", "test"): 20,
    ("airline", "base"): 50,
    ("retail", "train"): 74,
    ("retail", "test"): 40,
    ("retail", "base"): 114,
    ("telecom", "train"): 74,
    ("telecom", "test"): 40,
    ("telecom", "base"): 114,
    ("telecom", "full"): 2285,
    ("telecom-workflow", "full"): 2285,
    ("mock", "base"): MOCK_TASKS,
}


@pytest.mark.parametrize(("domain", "split"), list(EXPECTED_COUNTS))
def test_each_split_has_taus_task_count(catalogue, domain, split):
    expected = EXPECTED_COUNTS[(domain, split)]
    assert Split.objects.get(domain_id=domain, name=split).size == expected
    assert Task.objects.filter(domain_id=domain, splits__name=split).count() == expected


def test_every_domain_of_the_installed_tau2_is_loaded(catalogue):
    assert list(Domain.objects.values_list("name", flat=True)) == catalog.domain_names()
    assert set(catalog.domain_names()) >= {"airline", "retail", "telecom", "telecom-workflow"}


def test_a_task_knows_all_of_its_splits(catalogue):
    task = Task.objects.get(
        domain_id="telecom", task_id=catalog.get_domain("telecom").splits["test"][0]
    )
    assert {"test", "base", "full"} <= set(task.split_names)


def test_tools_carry_their_schema_and_read_write_kind(catalogue):
    book = Tool.objects.get(domain_id="airline", name="book_reservation")
    assert book.kind == "write"
    assert book.requestor == "assistant"
    assert book.schema["function"]["name"] == "book_reservation"
    assert "$defs" in book.parameters or "properties" in book.parameters
    assert Tool.objects.get(domain_id="airline", name="get_user_details").kind == "read"
    phone = Tool.objects.filter(domain_id="telecom", requestor="user")
    assert phone.count() == 30
    assert phone.get(name="toggle_airplane_mode").kind == "write"


def test_a_task_reads_as_people_need_it(catalogue):
    task = Task.objects.get(domain_id="retail", task_id="5")
    assert task.title == "You want to exchange the water bottle and the desk lamp."
    assert task.known_info == "You are mei_kovacs_8020 in zipcode 28236."
    assert task.unknown_info == "You do not remember your email address"
    assert task.reward_basis == RETAIL_BASIS
    assert task.expected_calls == 5
    assert task.changes_db is True
    assert "return_delivered_order_items" in task.tool_names
    read_only = Task.objects.get(domain_id="airline", task_id="0")
    assert read_only.changes_db is False
    assert read_only.expected_calls == 0


def test_changes_db_means_an_expected_write_tool(catalogue):
    kinds = {(t.requestor, t.name): t.kind for t in Tool.objects.filter(domain_id="retail")}
    for task in Task.objects.filter(domain_id="retail"):
        actions = task.evaluation_criteria.get("actions") or []
        writes = [a for a in actions if kinds.get((a["requestor"], a["name"])) == "write"]
        assert task.changes_db is bool(writes), task.task_id


def test_reloading_is_idempotent_and_records_the_version(catalogue):
    before = Task.objects.count(), Tool.objects.count(), Split.objects.count()
    ids = set(Task.objects.values_list("pk", flat=True))

    report = catalogue_load()

    assert report.changed == []
    assert set(report.unchanged) == set(catalog.domain_names())
    assert (Task.objects.count(), Tool.objects.count(), Split.objects.count()) == before
    assert set(Task.objects.values_list("pk", flat=True)) == ids
    latest = CatalogueLoad.objects.latest()
    assert latest.tau2_version == catalog.tau2_version()
    assert latest.task_set_hash == catalog.catalogue_hash()
    assert latest.counts["telecom"]["full"] == 2285


def test_a_forced_reload_updates_rows_in_place(catalogue):
    task = Task.objects.get(domain_id="airline", task_id="0")
    Task.objects.filter(pk=task.pk).update(title="tampered")
    Domain.objects.filter(name="airline").update(content_hash="stale")

    call_command("load_tasks", "airline")

    task.refresh_from_db()
    assert task.title.startswith("You want to cancel reservation EHGLP3")
    assert Task.objects.filter(domain_id="airline").count() == 50
    assert Task.objects.get(domain_id="airline", task_id="0").pk == task.pk


def test_load_tasks_refuses_an_unknown_domain(catalogue):
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="Unknown domain"):
        call_command("load_tasks", "bakery")


def test_the_task_set_hash_is_stable_across_loads():
    # τ² stamps some messages with the time of loading; the hash must not see that.
    assert catalog.catalogue_hash() == catalog.catalogue_hash()
    assert len(catalog.catalogue_hash()) == 16


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ("You want to cancel. It may be late.", "You want to cancel."),
        ("Your phone\nhas no service! Fix it.", "Your phone has no service!"),
        ("One sentence only", "One sentence only"),
        ("", ""),
    ],
)
def test_title_is_the_first_sentence(text, title):
    assert catalog.title_from(text) == title


def test_if_needed_skips_a_complete_catalogue_but_completes_a_partial_one(catalogue):
    from io import StringIO

    out = StringIO()
    call_command("load_tasks", if_needed=True, stdout=out)
    assert "already loaded" in out.getvalue()

    Domain.objects.filter(name="mock").delete()  # e.g. an earlier `load_tasks airline`
    out = StringIO()
    call_command("load_tasks", if_needed=True, stdout=out)
    assert "mock" in out.getvalue() and "loaded" in out.getvalue()
    assert Task.objects.filter(domain_id="mock").count() == MOCK_TASKS
