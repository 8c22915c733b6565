# isort: off
# τ² (and litellm) must be imported through tau2_env._tau2 before anything else imports
# them: it keeps litellm from downloading its price list (offline: seconds of retries).
import tau2_env._tau2  # noqa: F401

# isort: on
from tests.support.fixtures import *  # noqa: F403
