# τ² (and litellm) must be imported through tau2_env.llm._tau2 before anything else imports
# them: it keeps litellm from downloading its price list (offline: seconds of retries).
# (llm_server and asgi_server come from tests/conftest.py, as everywhere.)
import tau2_env.llm._tau2  # noqa: F401
