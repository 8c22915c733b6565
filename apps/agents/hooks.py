"""The agents app's hooks: what the apps above it register (in their ``AppConfig.ready``)
to take part in outside agents' episodes, since agents never imports them.

* :func:`training_register` — the training sessions (``apps.training``): episodes a
  studio key plays under a session name are asked of it before they start (its split
  guard: warn, or refuse) and told to it once recorded as runs.

Light on purpose (it imports no models): an app's ``apps.py`` imports it at the top,
and registering costs nothing at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from apps.runs.models import Run

__all__ = [
    "EpisodeRefused",
    "TrainingEpisode",
    "TrainingHooks",
    "training_hooks",
    "training_register",
]


class EpisodeRefused(Exception):
    """An episode may not start; ``str()`` says why, to the agent."""


@dataclass(frozen=True)
class TrainingEpisode:
    """An episode about to start, or started, under training session ``session`` (its
    name) of the studio key ``key_id`` of person ``user_id``: task ``task_id`` of
    ``domain``, drawn from ``split``."""

    user_id: int
    key_id: str
    session: str
    domain: str
    split: str
    task_id: str
    warning: str = ""  # what the training hooks' admit() said of it, if anything


class TrainingHooks(Protocol):
    """What the training app does with a key's named episodes."""

    def admit(self, *, episode: TrainingEpisode) -> str | None:
        """Before ``episode`` starts (on its own thread): a warning line for its opening,
        or ``None``; raises :class:`EpisodeRefused` to refuse it."""

    def recorded(self, *, episode: TrainingEpisode, run: Run) -> None:
        """``episode`` is recorded as ``run`` (on the recorder's thread)."""


_training: TrainingHooks | None = None


def training_register(hooks: TrainingHooks | None) -> None:
    """Make ``hooks`` the training sessions' (``None``: episodes' names are ignored)."""
    global _training
    _training = hooks


def training_hooks() -> TrainingHooks | None:
    """The registered training hooks, or ``None`` (the training app is not installed)."""
    return _training
