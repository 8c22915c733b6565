"""Run pages: history (list, detail, JSON, compare, stop) and starting runs."""

from apps.runs.views.history import run_compare, run_detail, run_json, run_list, run_stop
from apps.runs.views.start import run_new

__all__ = ["run_compare", "run_detail", "run_json", "run_list", "run_new", "run_stop"]
