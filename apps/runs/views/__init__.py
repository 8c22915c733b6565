"""Run pages: history (list, detail, JSON, compare, stop), starting runs, and review."""

from apps.runs.views.forks import run_fork
from apps.runs.views.history import run_compare, run_detail, run_json, run_stop
from apps.runs.views.listing import run_list
from apps.runs.views.review import label_add, label_delete, label_slot, review_queue
from apps.runs.views.start import run_new, run_rerun, run_task_picker

__all__ = [
    "label_add",
    "label_delete",
    "label_slot",
    "review_queue",
    "run_compare",
    "run_detail",
    "run_fork",
    "run_json",
    "run_list",
    "run_new",
    "run_rerun",
    "run_stop",
    "run_task_picker",
]
