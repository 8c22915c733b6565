"""kombu's Redis transport, mended where a broker restart made a Celery worker exit.

The one module for the broker's library internals, for the kombu versions in
:data:`TESTED` only: :func:`install` (``RunsConfig.ready``: every worker, web process and
``manage.py``) raises :class:`UntestedKombu` on any other, so a kombu upgrade checks this
hook first (``tests/runs/test_broker_restart.py`` says whether it is still needed).

**What happened** (issue 19; kombu 5.7.0 and Celery 5.7.0, the latest releases): Redis
restarting while a worker held unacknowledged messages (``acks_late`` runs in progress)
and had a ``BRPOP`` in flight — a fresh worker given fewer runs than it has threads —
ended the worker with ``Unrecoverable error: AttributeError("'NoneType' object has no
attribute 'hostname'")``. Celery's ``Consumer.on_connection_error_after_connected``
calls ``connection.collect()``, then ``connection.close()``:

1. ``collect`` closes the default channel (the task consumer's) first. Its ``close``
   drains the pending ``BRPOP`` reply before anything else; with Redis gone that raises
   a connection error, which ``maybe_close_channel`` swallows: the channel stays open.
2. ``Transport.close_connection`` then closes the channels newest first and stops at the
   first that raises: the remote-control (pidbox) channel deletes its auto-delete
   fanout queue, which raises with Redis gone, so the default channel is not reached.
   ``collect`` swallows that too and detaches the transport (``transport.client =
   None``), its channels' connection pools already dropped.
3. Whatever then needs the old default channel's Redis — ``close`` restoring its
   unacknowledged messages (``QoS.restore_unacked``), or a run that ends acknowledging
   its message on it — builds a new pool from ``Channel._connparams``, which reads the
   host from ``transport.client``: ``None``. An ``AttributeError`` is no connection
   error, so it passes every ``ignore_errors`` and ends the worker.

**The mend**: ``Channel._connparams`` of a channel whose transport was detached (or that
has none) raises the connection error it is — that connection is closed, nothing can
be done through it — which every caller on those paths already handles as it handles
Redis being down: the restore is given up (the messages stay in Redis's unacked set, if
it kept them), an acknowledgement is logged as not made ("Couldn't ack"), and the
worker reconnects on a new connection. A live channel builds its pools as before.
"""

from __future__ import annotations

import functools
import importlib.metadata

import redis.exceptions
from kombu.transport import redis as kombu_redis

__all__ = ["TESTED", "UntestedKombu", "install", "installed"]

# The kombu releases the hook below was checked against (exact versions).
TESTED: tuple[str, ...] = ("5.7.0",)


class UntestedKombu(RuntimeError):
    """The installed kombu is not a version the hook here was checked against."""

    def __init__(self, found: str | None) -> None:
        self.found = found
        super().__init__(
            f"kombu {found or '(not installed)'} is installed, but apps/runs/kombu_compat.py "
            "wraps its Redis transport's Channel._connparams and was checked only with "
            f"kombu {' or '.join(TESTED)}. Install kombu=={TESTED[-1]}, or check the hook "
            "against this kombu, run tests/runs/test_broker_restart.py and add the version "
            "to kombu_compat.TESTED."
        )


def _installed_version() -> str | None:
    try:
        return importlib.metadata.version("kombu")
    except importlib.metadata.PackageNotFoundError:
        return None


def transport_detached(channel: kombu_redis.Channel) -> bool:
    """Whether ``channel`` lost its connection's details: closed by its transport
    (``connection`` None) or its transport detached by ``Connection.collect`` or
    ``close`` (``transport.client`` None)."""
    transport = channel.connection
    return transport is None or transport.client is None


def _mended_connparams(original):
    @functools.wraps(original)
    def _connparams(self, asynchronous=False):
        if transport_detached(self):
            raise redis.exceptions.ConnectionError(
                "This channel's broker connection was closed: nothing can be sent, "
                "acknowledged or restored through it."
            )
        return original(self, asynchronous=asynchronous)

    _connparams.tau2_mended = True
    return _connparams


def installed() -> bool:
    """Whether :func:`install` has applied the hook in this process."""
    return getattr(kombu_redis.Channel._connparams, "tau2_mended", False)


def install() -> None:
    """Apply the hook (idempotent). Raises :class:`UntestedKombu` on an untested kombu."""
    found = _installed_version()
    if found not in TESTED:
        raise UntestedKombu(found)
    if not installed():
        kombu_redis.Channel._connparams = _mended_connparams(kombu_redis.Channel._connparams)
