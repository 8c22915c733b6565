"""Prompt datasets for training on τ²-bench with TRL (``GRPOTrainer(train_dataset=...)``).

One row per task of a domain's split. ``prompt`` is the conversation τ²'s agent sees
before the customer speaks, in the chat format TRL's environment examples use (a list
of ``{"role", "content"}`` messages): τ²'s system prompt (its agent instructions and the
domain's policy), τ²'s greeting, and an empty user turn, which
:meth:`tau2_env.faces.trl_environment.Tau2Environment.reset` fills with the customer's first
message (TRL appends ``reset``'s text to the prompt's last message). The other columns
are ``reset``'s arguments: ``domain``, ``task_id``, ``split``, ``seed``; and
``environment`` (the domain) for TRL's multi-environment mode.

Train on ``train`` and evaluate on ``test``, so that training does not leak into the
benchmark.
"""

from __future__ import annotations

from typing import Any

from datasets import Dataset

from tau2_env.engine import catalog
from tau2_env.faces.trl_environment import GREETING, agent_system_prompt

__all__ = ["opening_prompt", "prompt_dataset"]


def opening_prompt(domain: str) -> list[dict[str, str]]:
    """The prompt of any task of ``domain``: τ²'s system prompt, its greeting, and the
    empty user turn ``reset`` fills. Raises ``KeyError`` for an unknown domain."""
    return [
        {"role": "system", "content": agent_system_prompt(catalog.get_domain(domain).policy)},
        {"role": "assistant", "content": GREETING},
        {"role": "user", "content": ""},
    ]


def prompt_dataset(*, domain: str, split: str, seed: int = 0) -> Dataset:
    """The prompts of every task of ``domain``'s ``split``, in τ²'s order, one row each:
    ``prompt``, ``domain``, ``task_id``, ``split``, ``seed`` (the same for every row;
    the server draws a task with it only when a row has no ``task_id``) and
    ``environment``. Raises ``KeyError`` for an unknown domain or split."""
    splits = catalog.get_domain(domain).splits
    if split not in splits:
        raise KeyError(
            f"Unknown split {split!r} for domain {domain!r}; known: {', '.join(sorted(splits))}"
        )
    prompt = opening_prompt(domain)
    rows: dict[str, list[Any]] = {
        "prompt": [],
        "domain": [],
        "task_id": [],
        "split": [],
        "seed": [],
        "environment": [],
    }
    for task_id in splits[split]:
        rows["prompt"].append(prompt)
        rows["domain"].append(domain)
        rows["task_id"].append(str(task_id))
        rows["split"].append(split)
        rows["seed"].append(seed)
        rows["environment"].append(domain)
    return Dataset.from_dict(rows)
