"""Starting and watching evaluations. (Being built: issue 10.)"""

from django.http import Http404


def _unbuilt(request, *args, **kwargs):
    raise Http404("Not built yet")


evaluation_new = evaluation_detail = evaluation_state = _unbuilt
evaluation_pause = evaluation_resume = evaluation_stop = evaluation_retry = _unbuilt
