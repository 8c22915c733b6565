"""History, τ² results out and in, comparison, leaderboard. (Being built: issue 10.)"""

from django.http import Http404


def _unbuilt(request, *args, **kwargs):
    raise Http404("Not built yet")


evaluation_list = evaluation_json = evaluation_csv = _unbuilt
evaluation_import = evaluation_compare = leaderboard = _unbuilt
