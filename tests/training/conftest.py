"""Training sessions' tests: studio keys plugged into the agent faces (AgentsConfig.ready
installs the resolver; other suites' fixtures may have put the default back)."""

from __future__ import annotations

import pytest

from apps.agents.credentials import install


@pytest.fixture(autouse=True)
def studio_keys():
    install()
