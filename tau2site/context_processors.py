"""The site header's context on every page: it composes every app, so it lives here."""

import re

from django.conf import settings

from apps.accounts.access import can_review
from apps.evaluations.models import Evaluation
from apps.runs.models import Run
from apps.tasks.models import Domain
from apps.workers.selectors import workers_liveness
from tau2_env.generations import tau2_version

_SLUG = re.compile(r"^[-a-zA-Z0-9_]{1,64}$")

# The header's places, by the URL namespace (and name) a page is served under.
_SECTIONS = {
    "tasks": "tasks",
    "play": "play",
    "runs": "runs",
    "evaluations": "evaluations",
    "inference": "models",
    "api": "api",
    "agents": "agents",
    "training": "training",
    "datasets": "datasets",
}


def nav_section(match) -> str:
    """Which item of the header is the current place (``""`` when none is)."""
    if match is None:
        return ""
    if match.url_name == "leaderboard":
        return "leaderboard"
    if match.namespace == "runs" and match.url_name == "review_queue":
        return "review"
    if match.namespace == "tasks" and match.url_name == "domain":
        return "policy"
    return _SECTIONS.get(match.namespace, "")


def _page_domain(request, match) -> str:
    """The domain the page is about: in its path, its filter, or its run or evaluation."""
    if match is None:
        return ""
    if match.kwargs.get("domain"):
        return str(match.kwargs["domain"])
    if request.GET.get("domain"):
        return request.GET["domain"]
    pk = match.kwargs.get("pk")
    if pk is not None and match.namespace in ("runs", "play", "evaluations"):
        model = Evaluation if match.namespace == "evaluations" else Run
        return model.objects.filter(pk=pk).values_list("domain", flat=True).first() or ""
    return ""


def nav_domain(request, match) -> str:
    """The domain "Policy & tools" opens: the current page's when it names a known one,
    else the default (a malformed or unknown ``?domain=`` never breaks the header)."""
    name = _page_domain(request, match)
    known = name and name != settings.TAU2_DOMAIN and _SLUG.match(name)
    if known and Domain.objects.filter(name=name).exists():
        return name
    return settings.TAU2_DOMAIN


def catalogue(request):
    """What the header needs on every page: the default domain and split, where the
    page is (``nav_section``) and which domain's policy and tools it links to; and for
    the footer, the τ² installed here (read from the package's metadata once per process:
    no query, and τ² itself is not imported)."""
    match = getattr(request, "resolver_match", None)
    return {
        "catalogue_tau2": tau2_version(),
        "default_domain": settings.TAU2_DOMAIN,
        "default_split": settings.TAU2_SPLIT,
        "nav_section": nav_section(match),
        "nav_reviewer": can_review(getattr(request, "user", None)),
        "nav_domain": nav_domain(request, match),
    }


# The pages where people wait for a worker: a run, a play session, an evaluation, a race.
_LIVE_PAGES = frozenset({"runs", "play", "evaluations", "races"})


def worker_liveness(request):
    """``worker_liveness`` (``apps.workers.selectors.Liveness``) on the live pages, for
    the banner saying no worker is alive (``includes/worker_banner.html``); nothing
    elsewhere, so other pages make no query."""
    match = getattr(request, "resolver_match", None)
    if match is None or match.url_name != "detail" or match.namespace not in _LIVE_PAGES:
        return {}
    return {"worker_liveness": workers_liveness()}
