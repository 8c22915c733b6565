"""Which thread ran what: the event loop's or a worker pool's."""

from __future__ import annotations

import threading


def record_threads(monkeypatch, cls: type, *names: str) -> list[tuple[str, str]]:
    """Wrap methods ``names`` of ``cls`` for the test; returns the list that each call
    appends ``(method name, the calling thread's name)`` to, in call order."""
    where: list[tuple[str, str]] = []
    for name in names:
        original = getattr(cls, name)

        def spy(self, *args, _original=original, _name=name, **kwargs):
            where.append((_name, threading.current_thread().name))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(cls, name, spy)
    return where
