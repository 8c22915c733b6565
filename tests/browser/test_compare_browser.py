"""alice ticks one run and presses Compare, in Chromium: she is back on the run list with
that run still ticked and told why; ticking a second one then compares them."""

import re

import pytest
from playwright.sync_api import expect

from apps.runs.models import Run
from tests.support.browser import page_signed_in_as
from tests.support.scripts import queued_run

pytestmark = pytest.mark.browser


def test_compare_with_one_run_keeps_the_tick_and_says_why(page, alice, base_url):
    first, second = queued_run(alice), queued_run(alice)
    Run.objects.filter(pk__in=[first.pk, second.pk]).update(status=Run.Status.COMPLETED)
    page = page_signed_in_as(page, alice, base_url)

    page.goto("/runs/")
    page.get_by_label(f"compare run {first.pk}", exact=True).check()
    page.get_by_test_id("compare").click()

    expect(page).to_have_url(re.compile(rf"/runs/\?picked={first.pk}$"))
    expect(page.get_by_text("Pick 2 to 4 runs to compare; you picked 1 run.")).to_be_visible()
    expect(page.get_by_label(f"compare run {first.pk}", exact=True)).to_be_checked()
    expect(page.get_by_label(f"compare run {second.pk}", exact=True)).not_to_be_checked()

    page.get_by_label(f"compare run {second.pk}", exact=True).check()
    page.get_by_test_id("compare").click()

    expect(page).to_have_url(re.compile(r"/runs/compare/\?"))
    expect(page.get_by_test_id("compare-column")).to_have_count(2)
