"""One default per setting of every form that starts runs: the run form, a race, an
evaluation, play, a fork. Each form reads its initial values here; nothing else writes
them.

They are τ²'s own, so a run started here with nothing changed is what ``tau2 run`` with
no flag does:

* :data:`MAX_STEPS` is ``tau2 run --max-steps``'s default (``tau2.config.DEFAULT_MAX_STEPS``,
  200). A lower limit (100 was the run form's) ends long telecom conversations that
  ``tau2 run`` would finish, with a different reward.
* :data:`MAX_ERRORS` is ``--max-errors``'s default (10).
* :data:`SEED` is ``--seed``'s default (300).
* :data:`NUM_TRIALS` is 4, not ``--num-trials``'s 1: pass^k needs k trials, and τ²'s
  leaderboard reports pass^1 … pass^4 over 4 trials per task (``tau2 submit``'s
  submission asks for ``pass_1`` … ``pass_4``; the published reference scores are "4
  trials"). One trial gives pass^1 only, and no leaderboard row.

:func:`max_steps` caps the step limit at the server's ``TAU2_RUN_MAX_STEPS``;
:func:`customer_model` is the server's customer (``TAU2_USER_MODEL``), which every form's
customer picker starts on (a fork's starts empty: the run's own customer goes on) unless
its person cannot run it (``apps.runs.forms.customer_initial``).
"""

from __future__ import annotations

from django.conf import settings

from tau2_env import config
from tau2_env.config import DEFAULT_MAX_ERRORS, DEFAULT_MAX_STEPS
from tau2_env.engine.evaluation import DEFAULT_SEED

__all__ = ["MAX_ERRORS", "MAX_STEPS", "NUM_TRIALS", "SEED", "customer_model", "max_steps"]

MAX_STEPS: int = DEFAULT_MAX_STEPS
MAX_ERRORS: int = DEFAULT_MAX_ERRORS
SEED: int = DEFAULT_SEED
NUM_TRIALS = 4


def max_steps() -> int:
    """The step limit a form starts with: τ²'s, or the server's cap if that is lower."""
    return min(MAX_STEPS, settings.TAU2_RUN_MAX_STEPS)


def customer_model() -> str:
    """The customer's model a form starts with: the server's (``TAU2_USER_MODEL``)."""
    return config.provider_settings().model
