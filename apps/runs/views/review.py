"""Review on the run page: label the run or one of its messages, delete a label, the queue.

Each place that holds labels (the run, or one message) is a *slot*
(``includes/review_slot.html``); htmx posts a slot's form and swaps the slot for the
answer, and without JavaScript the forms post and come back to the run page.
"""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from apps.accounts.access import can_delete_label, can_review, can_start, signin_url
from apps.runs import autoreview, review, selectors
from apps.runs.forms import LabelForm
from apps.runs.models import ReviewLabel, Run
from apps.runs.views.access import run_for_user
from apps.runs.views.review_forms import FindingForm, autoreview_form


def review_context(request, run: Run, events: list[dict]) -> dict:
    """What the run page needs for review: the run's slot, and ``e["review"]`` on each event."""
    labels = review.run_labels(run_id=run.pk)
    reviewer = can_review(request.user)
    for e in events:
        e["review"] = _slot(request, run, e["seq"], labels.by_seq.get(e["seq"], []), reviewer)
    slot = _slot(request, run, None, labels.on_run, reviewer)
    slot["auto"] = {
        "reviews": autoreview.run_autoreviews(run_id=run.pk),
        "form": autoreview_form(request.user)
        if autoreview.can_request(request.user) and run.is_final
        else None,
    }
    return {"review": slot}


@require_POST
def label_add(request, pk: int):
    run = run_for_user(request, pk)
    if not can_review(request.user):
        raise PermissionDenied("Only reviewers may label runs.")
    form = LabelForm(request.POST, seq=_seq(request.POST.get("seq", "")))
    if form.is_valid():
        data = form.cleaned_data
        seq = data["seq"]
        event = None if seq is None else selectors.run_event_get(run_id=run.pk, seq=seq)
        try:
            review.label_create(
                run=run,
                by=request.user,
                event=event,
                category=data["category"],
                severity=data["severity"],
                note=data["note"],
            )
        except ValidationError as error:
            form.add_error(None, error.messages)
        else:
            return _answer(request, run, seq)
    if not request.htmx:
        messages.error(request, "The label was not saved: " + " ".join(_errors(form)))
    return _answer(request, run, form.initial.get("seq"), form=form)


@require_GET
def label_slot(request, pk: int):
    """The slot of message ``?seq=`` (for a message that arrived live, see review.js)."""
    run = run_for_user(request, pk)
    seq = _seq(request.GET.get("seq", ""))
    if seq is None:
        raise Http404("No such message")
    event = selectors.run_event_get(run_id=run.pk, seq=seq)
    return _slot_fragment(request, run, event.seq)


@require_POST
def label_delete(request, pk: int, label_pk: int):
    run = run_for_user(request, pk)
    label = review.label_get(run_id=run.pk, pk=label_pk)
    seq = label.event.seq if label.event else None
    review.label_delete(label=label, by=request.user)
    return _answer(request, run, seq)


def review_queue(request):
    if not can_start(request.user):
        return redirect(signin_url(next_url=request.get_full_path(), reason="runs"))
    if not can_review(request.user):
        raise PermissionDenied("The review queue is for reviewers.")
    page = Paginator(review.review_queue(), 30).get_page(request.GET.get("page"))
    pending = autoreview.pending_findings()
    context = {"page": page, "pending": pending[:100], "pending_count": pending.count()}
    return render(request, "runs/review_queue.html", context)


def _slot(request, run: Run, seq: int | None, labels: list, reviewer: bool, form=None) -> dict:
    for label in labels:
        auto = label.origin == ReviewLabel.Origin.AUTO
        label.deletable = not auto and can_delete_label(request.user, author_id=label.created_by_id)
        # A finding a reviewer may still decide on, with its edit form filled in.
        label.decidable = auto and reviewer and label.status == ReviewLabel.Status.PENDING
        if label.decidable:
            label.edit_form = FindingForm(
                initial={
                    "source": label.source,
                    "severity": label.severity,
                    "kind": label.kind,
                    "justification": label.justification,
                },
                prefix=f"finding-{label.pk}",
            )
    return {
        "run": run,
        "seq": seq,
        "anchor": _anchor(seq),
        "labels": labels,
        "form": (form or LabelForm(seq=seq)) if reviewer else None,
    }


def _answer(request, run: Run, seq: int | None, *, form: LabelForm | None = None):
    """The slot of ``seq`` as it is now (htmx), or back to it on the run page."""
    if not request.htmx:
        return redirect(f"{run.get_absolute_url()}#{_anchor(seq)}")
    return _slot_fragment(request, run, seq, form=form)


def _slot_fragment(request, run: Run, seq: int | None, *, form: LabelForm | None = None):
    labels = review.run_labels(run_id=run.pk)
    here = labels.on_run if seq is None else labels.by_seq.get(seq, [])
    slot = _slot(request, run, seq, here, can_review(request.user), form)
    return render(request, "includes/review_slot.html", {"slot": slot})


def _seq(raw: str) -> int | None:
    """A message number from a form or a query string; None when it is not one."""
    return int(raw) if raw.isascii() and raw.isdigit() and len(raw) <= 9 else None


def _anchor(seq: int | None) -> str:
    return "review-run" if seq is None else f"review-{seq}"


def _errors(form: LabelForm) -> list[str]:
    return [message for errors in form.errors.values() for message in errors]
