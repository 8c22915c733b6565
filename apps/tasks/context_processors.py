from django.conf import settings


def catalogue(request):
    """What the header needs on every page."""
    return {"default_domain": settings.TAU2_DOMAIN, "default_split": settings.TAU2_SPLIT}
