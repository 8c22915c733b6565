"""Evaluation pages: ``live`` (start, watch, pause/resume/stop/retry) and ``results``
(history, τ² results out and in, CSV, comparison, leaderboard)."""
