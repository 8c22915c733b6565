"""The datasets page in Chromium on the live ASGI server: alice chooses a selection, sees
its counts and first row, and downloads it; the file reads back with ``datasets``."""

from __future__ import annotations

import datasets
import pytest

from tests.support.browser import page_signed_in_as
from tests.support.scored_runs import GOLD, LOOKUP, certificate, stored_run

pytestmark = [pytest.mark.browser]


def test_alice_previews_a_selection_and_downloads_it_from_the_page(
    page, alice, llm_server, asgi_server, tmp_path
):
    solved = stored_run(alice, llm_server, GOLD, model="org/model-a")
    # airline/27 as each τ² expects; the $100 certificate fails on both (1.x owes none).
    failed = stored_run(alice, llm_server, [LOOKUP, certificate(100)], model="org/model-a")
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page_signed_in_as(page, alice, asgi_server.url)

    page.goto("/datasets/")
    page.select_option("select[name=domain]", "airline")
    page.select_option("[data-testid=dataset-type]", "preference")
    page.select_option("select[name=format]", "parquet")
    page.get_by_role("button", name="Preview").click()
    page.wait_for_url("**/datasets/?*type=preference*")
    assert page.get_by_test_id("dataset-rows").inner_text().startswith("2 conversations")
    assert page.get_by_test_id("dataset-pairs").inner_text().startswith("1 preference pair")
    assert f'"chosen_run_id": {solved.pk}' in page.get_by_test_id("dataset-first-row").inner_text()

    with page.expect_download() as info:
        page.get_by_test_id("dataset-download").click()
    download = info.value
    assert download.suggested_filename == "tau2-preference-airline.parquet"
    path = tmp_path / download.suggested_filename
    download.save_as(path)
    (pair,) = datasets.load_dataset(
        "parquet", data_files=str(path), split="train", cache_dir=str(tmp_path / "cache")
    ).to_list()
    assert (pair["chosen_run_id"], pair["rejected_run_id"]) == (solved.pk, failed.pk)

    # The conversations as JSON Lines, streamed by the ASGI server.
    page.goto("/datasets/?domain=airline&type=sft&format=jsonl")
    with page.expect_download() as info:
        page.get_by_test_id("dataset-download").click()
    info.value.save_as(tmp_path / "sft.jsonl")
    rows = datasets.load_dataset(
        "json", data_files=str(tmp_path / "sft.jsonl"), split="train", cache_dir=str(tmp_path / "c")
    )
    assert rows["run_id"] == [solved.pk, failed.pk]
    assert errors == []
