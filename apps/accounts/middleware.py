"""Framing policy: X-Frame-Options DENY everywhere, except inside a Hugging Face Space.

A Space shows the app in an iframe on huggingface.co. With ``TAU2_EMBED_IN_SPACE`` on,
responses carry ``Content-Security-Policy: frame-ancestors 'self' <TAU2_FRAME_ANCESTORS>``
instead of ``X-Frame-Options`` (which cannot name another origin).
"""

from __future__ import annotations

from django.conf import settings


class FramePolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        explicit = "X-Frame-Options" in response or "Content-Security-Policy" in response
        if settings.TAU2_EMBED_IN_SPACE and not explicit:  # a view's own policy stands
            ancestors = " ".join(["'self'", *settings.TAU2_FRAME_ANCESTORS])
            response.headers["Content-Security-Policy"] = f"frame-ancestors {ancestors}"
            # Runs before XFrameOptionsMiddleware sees the response (it is listed after it).
            response.xframe_options_exempt = True
        return response
