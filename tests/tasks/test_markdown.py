"""Markdown on pages (policies, messages) is sanitised by nh3: what markdown makes stays,
anything a hostile policy or message could run is gone."""

from __future__ import annotations

import pytest

from apps.tasks.templatetags.tau2 import markdown


def test_markdown_renders_the_blocks_policies_use():
    html = markdown(
        "# Policy\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n- one\n- **two**\n\n```\ncode\n```"
    )
    for tag in ("<h1>", "<table>", "<td>1</td>", "<li>", "<strong>two</strong>", "<pre><code>"):
        assert tag in html


def test_a_link_keeps_its_address_and_title():
    html = markdown('[the policy](https://example.com/p "Policy")')
    assert 'href="https://example.com/p"' in html and 'title="Policy"' in html


@pytest.mark.parametrize(
    "hostile",
    [
        "<script>alert('x')</script>",
        '<img src="x" onerror="alert(1)">',
        "[click](javascript:alert(1))",
        '<a href="data:text/html,<script>alert(1)</script>">x</a>',
        "<iframe src='https://evil.example'></iframe>",
        '<p onclick="alert(1)" style="background:url(x)">hi</p>',
        "<svg><script>alert(1)</script></svg>",
        '<form action="https://evil.example"><input name="q"></form>',
        "<style>body{display:none}</style>",
        '<a href="https://ok.example" onmouseover="alert(1)">ok</a>',
    ],
)
def test_hostile_markdown_loses_everything_that_could_run(hostile):
    html = markdown(f"Before {hostile} after").lower()
    for bad in (
        "<script",
        "onerror",
        "onclick",
        "onmouseover",
        "javascript:",
        "data:text",
        "<iframe",
        "<img",
        "<svg",
        "<form",
        "<input",
        "<style",
        "style=",
    ):
        assert bad not in html, (hostile, html)
    assert "before" in html and "after" in html  # the text around it stays


def test_text_of_stripped_tags_stays_but_script_content_does_not():
    assert "kept" in markdown("<span>kept</span>")
    assert "alert" not in markdown("<script>alert(1)</script>")
