"""The engine: one conversation over one τ²-bench task, and what is read from it.

``episode`` drives τ²'s orchestrator hop by hop; ``environments``, ``catalog`` and
``scoring`` wrap τ²'s domains, tasks and evaluator; ``evaluation`` (pass^k, seeds),
``diagnosis``, ``review``, ``alignment``, ``results`` and ``submission`` read runs.
Imports the llm room and the shared ground, never the gate or the faces.
"""
