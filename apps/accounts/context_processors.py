from django.utils.functional import SimpleLazyObject

from apps.accounts.selectors import account_header_for, dev_login_enabled


def account(request):
    """``account``: the signed-in person's header data (None when anonymous), read lazily."""
    user = getattr(request, "user", None)
    return {
        "account": SimpleLazyObject(lambda: account_header_for(user=user)),
        "dev_login_enabled": dev_login_enabled(),
        "embed_in_space": _embed(),
    }


def _embed() -> bool:
    from django.conf import settings

    return bool(settings.TAU2_EMBED_IN_SPACE)
