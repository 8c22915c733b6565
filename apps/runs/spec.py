"""One run's settings as one object: :class:`RunSpec`.

Who plays each side of the conversation (the agent, the simulated customer, τ²'s NL
judge: each a model on its route — Hugging Face's router, or a connection — with τ²'s
``llm_args``), the step and error limits, the wall-clock timeout (``tau2 run
--timeout``), the seed given (as to ``tau2 run --seed``) and the paper's ablation
(``mode``). Each form, API and face builds one, once; every default is filled in when
it is built (:meth:`RunSpec.__post_init__`), nowhere else. A model run, an evaluation
(for all its runs), a race's lanes, a fork, a play session and an outside agent's
episode each carry one; ``run.spec`` / ``evaluation.spec`` read it back
(:func:`spec_read`) from the columns :func:`spec_columns` writes.

Nothing of a run's life is here (no task, no prices, no trial): only what a
conversation is played with. A connection is held as the row it is, never its key.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from apps.runs import defaults
from tau2_env.llm.llm_args import DEFAULT_AGENT_ARGS, DEFAULT_USER_ARGS

if TYPE_CHECKING:
    from apps.connections.models import Connection

__all__ = ["RunSpec", "Side", "spec_columns", "spec_read"]

# The ablation a spec runs in by default (``apps.runs.models.Run.Mode.DEFAULT``).
DEFAULT_MODE = "default"


@dataclass(frozen=True)
class Side:
    """One side: ``model`` on ``connection`` (None: Hugging Face's router, where the
    model reads ``org/model[:provider|:policy]``) with τ²'s ``llm_args`` (None until a
    :class:`RunSpec` fills in τ²'s default for its role; the judge's stay None: τ²'s).
    ``llm=False``: no model plays it but a person or an outside agent, whom ``model``
    names; it has no llm_args."""

    model: str = ""
    connection: Connection | None = None
    llm_args: dict[str, Any] | None = None
    llm: bool = True

    @property
    def value(self) -> str:
        """The model as pickers and APIs name it: ``@connection/model`` on a connection."""
        if self.connection is not None:
            return f"@{self.connection.slug}/{self.model}"
        return self.model

    @property
    def provider(self) -> str:
        """The provider a router model pins (``org/model:provider``), else empty."""
        if self.llm and self.connection is None and ":" in self.model:
            return self.model.split(":", 1)[1]
        return ""


def _customer() -> Side:
    return Side()


@dataclass(frozen=True)
class RunSpec:
    """What one conversation is played with, every default filled in.

    ``agent``: who plays the agent (a model, or a person or an outside agent:
    ``Side(name, llm=False)``). ``customer``: the simulated customer
    (no model given: the server's, ``TAU2_USER_MODEL``). ``judge``: τ²'s NL judge, or
    None when the customer's route judges. ``seed``: the seed given, as to ``tau2 run
    --seed`` (None only for a session whose task was picked without one: play, an
    outside agent's episode). ``mode``: the paper's ablation (``Run.Mode``).
    ``retrieval_config``: a knowledge domain's retrieval configuration, as ``tau2 run
    --retrieval-config`` (banking_knowledge; "" for a domain without one — see
    :meth:`for_domain`, which fills in the domain's default). ``timeout``: τ²'s
    wall-clock limit of one conversation in seconds, as ``tau2 run --timeout`` (None,
    τ²'s default: none; τ² 1.x only — the engine refuses one on 0.2). ``embedder``: the
    connection model that embeds for an embedding configuration (``openai_embeddings``…),
    else None.
    """

    agent: Side
    customer: Side = field(default_factory=_customer)
    judge: Side | None = None
    max_steps: int = defaults.MAX_STEPS
    max_errors: int = defaults.MAX_ERRORS
    seed: int | None = defaults.SEED
    mode: str = DEFAULT_MODE
    retrieval_config: str = ""
    timeout: float | None = None
    embedder: Side | None = None

    def __post_init__(self) -> None:
        # The one place the sides' defaults are filled in: the server's customer, and
        # τ²'s llm_args of each side (as `tau2 run` without --agent/--user-llm-args).
        agent, customer = self.agent, self.customer
        if agent.llm_args is None and agent.llm:
            agent = replace(agent, llm_args=dict(DEFAULT_AGENT_ARGS))
        model = (customer.model or "").strip()
        if not model:
            customer = Side(model=defaults.customer_model(), llm_args=customer.llm_args)
        elif model != customer.model:
            customer = replace(customer, model=model)
        if customer.llm_args is None:
            customer = replace(customer, llm_args=dict(DEFAULT_USER_ARGS))
        object.__setattr__(self, "agent", agent)
        object.__setattr__(self, "customer", customer)
        if self.judge is not None and not self.judge.model:
            object.__setattr__(self, "judge", None)
        if self.embedder is not None and not self.embedder.model:
            object.__setattr__(self, "embedder", None)

    def seeded(self) -> RunSpec:
        """This spec with a seed: τ²'s default when it has none (a model run needs one)."""
        return self if self.seed is not None else replace(self, seed=defaults.SEED)

    def for_domain(self, domain: str) -> RunSpec:
        """This spec for a conversation on ``domain``: a knowledge domain's retrieval
        configuration filled in (its default when none is chosen). Raises ``ValueError``
        saying why when ``domain`` cannot run with the one chosen (a configuration this
        server cannot run, one that embeds without an embeddings model, an embeddings model
        for one that embeds nothing, or one given for a domain without retrieval)."""
        # On first use: the catalogue imports τ² and litellm (seconds), which the models
        # (and so every manage.py command) must not pay for at start-up.
        from tau2_env.engine import catalog

        chosen = self.retrieval_config or None
        refusal = catalog.retrieval_refusal(
            domain=domain, retrieval_config=chosen, embeddings=self.embedder is not None
        )
        if refusal is not None:
            raise ValueError(refusal)
        config = chosen or catalog.default_retrieval_config(domain) or ""
        return self if config == self.retrieval_config else replace(self, retrieval_config=config)

    def with_agent(self, agent: Side) -> RunSpec:
        """This spec played by ``agent``'s model and connection, with this spec's agent
        llm_args (a race's lanes, a fork by another model)."""
        return replace(
            self, agent=Side(agent.model, agent.connection, llm_args=self.agent.llm_args)
        )


def spec_columns(spec: RunSpec, *, seed_field: str) -> dict[str, Any]:
    """The columns that store ``spec`` on a run (``seed_field="given_seed"``: its
    ``seed`` is the trial's) or an evaluation (``"seed"``); :func:`spec_read` reads
    them back."""
    judge, embedder = spec.judge, spec.embedder
    return {
        "agent_model": spec.agent.model,
        "agent_provider": spec.agent.provider,
        "agent_connection": spec.agent.connection,
        "agent_llm_args": spec.agent.llm_args,
        "user_model": spec.customer.model,
        "user_connection": spec.customer.connection,
        "user_llm_args": spec.customer.llm_args,
        "judge_model": judge.model if judge is not None else "",
        "judge_connection": judge.connection if judge is not None else None,
        "max_steps": spec.max_steps,
        "max_errors": spec.max_errors,
        "mode": spec.mode,
        "retrieval_config": spec.retrieval_config,
        "timeout": spec.timeout,
        "embedding_model": embedder.model if embedder is not None else "",
        "embedding_connection": embedder.connection if embedder is not None else None,
        seed_field: spec.seed,
    }


def spec_read(row, *, seed_field: str) -> RunSpec:
    """The :class:`RunSpec` stored in ``row``'s columns (a run or an evaluation, see
    :func:`spec_columns`); a row from before llm_args could be chosen reads τ²'s
    default. A run of another kind than ``model`` (play, an outside agent's), or an
    evaluation of an outside agent, reads its agent as no model."""
    llm = getattr(row, "kind", "model") == "model" and not getattr(row, "external_agent", False)
    return RunSpec(
        agent=Side(row.agent_model, row.agent_connection, row.agent_llm_args, llm=llm),
        customer=Side(row.user_model, row.user_connection, row.user_llm_args),
        judge=Side(row.judge_model, row.judge_connection) if row.judge_model else None,
        max_steps=row.max_steps,
        max_errors=row.max_errors,
        seed=getattr(row, seed_field),
        mode=row.mode,
        retrieval_config=row.retrieval_config,
        timeout=row.timeout,
        embedder=(
            Side(row.embedding_model, row.embedding_connection) if row.embedding_model else None
        ),
    )
