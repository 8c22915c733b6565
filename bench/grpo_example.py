"""GRPO on τ²-bench with TRL 1.16 — docs/training.md's "Train with TRL" script, runnable.

The model plays τ²'s agent against this server's simulated customer: each generation is
one OpenEnv session (``tau2_environment``), the reward is τ²'s (``get_reward``), the
prompts are the tasks of a domain's ``train`` split (``prompt_dataset``); evaluate on
``test`` afterwards, so that training does not leak into the benchmark::

    pip install -e ".[rl]"
    export TAU2_URL=https://your-server TAU2_API_KEY=tau2s_…
    export TAU2_TRAINING_SESSION="qwen3-1.7b airline grpo #1"   # optional
    python bench/grpo_example.py --model Qwen/Qwen3-1.7B --domain airline

A batch opens ``per_device_train_batch_size × gradient_accumulation_steps`` sessions at
once on the studio key: its session cap must admit that many.
"""

from __future__ import annotations

import argparse

from trl import GRPOConfig, GRPOTrainer

from tau2_env.faces.training_data import prompt_dataset
from tau2_env.faces.trl_environment import tau2_environment


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="GRPO on a τ²-bench domain with TRL.")
    parser.add_argument("--model", default="Qwen/Qwen3-1.7B")
    parser.add_argument("--domain", default="airline", choices=["airline", "retail", "telecom"])
    parser.add_argument("--split", default="train")
    parser.add_argument("--output-dir", default="tau2-grpo")
    parser.add_argument("--generations", type=int, default=8, help="rollouts per task")
    parser.add_argument("--batch-size", type=int, default=8, help="rollouts per device and step")
    args = parser.parse_args(argv)

    trainer = GRPOTrainer(
        model=args.model,
        reward_funcs=None,  # τ²'s reward, from the environment's get_reward()
        args=GRPOConfig(
            output_dir=args.output_dir,
            num_generations=args.generations,
            per_device_train_batch_size=args.batch_size,
            gradient_accumulation_steps=1,
            max_completion_length=8192,  # every turn: replies, tool calls and their results
            max_tool_calling_iterations=30,
            chat_template_kwargs={"enable_thinking": False},
            logging_steps=1,
            log_completions=True,
        ),
        train_dataset=prompt_dataset(domain=args.domain, split=args.split),
        environment_factory=tau2_environment(domain=args.domain),
    )
    trainer.train()


if __name__ == "__main__":
    main()
