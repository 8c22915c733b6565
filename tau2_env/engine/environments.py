"""Fresh τ² environments without validating a domain's database at every reset.

τ²'s constructors load and validate the whole database (airline: ~3,000 pydantic rows,
0.25–0.5 s and ~23 MiB each time). :func:`fresh_environment` validates it once per
process and per domain (the *pristine* database, never mutated) and gives every new
environment a database whose top-level collections are :class:`CopyOnAccessDict`s over
the pristine rows: a row is copied the first time this environment reads it, so a
conversation pays (in time and memory) only for the rows it touches, and no two
environments ever share a row they can change.

Domains whose database is not a set of ``dict[str, BaseModel]`` collections (telecom's
are lists) get unpickled copies of databases loaded once (:class:`_WholePristine`), the
customer's phone database too; domains whose constructor takes no ``db`` are built by
τ²'s own constructor.

Equivalence: the environment is built by the domain's own ``get_environment(db=...)``;
its database holds, for every key, either the pristine row or this environment's copy
of it, so ``model_dump()`` (and τ²'s DB hash, which reads the dict directly) sees
exactly what a freshly loaded database would, plus this conversation's changes.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import inspect
import json
import pickle
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from pydantic import BaseModel

from tau2_env.llm import compat

__all__ = [
    "CopyOnAccessDict",
    "fresh_environment",
    "fresh_environments_for_tau2",
    "warm",
    "warm_in_background",
]


class CopyOnAccessDict(dict):
    """A ``dict`` over shared rows that are never handed out: each row is replaced by a
    private copy (``copy_row(key)``) the first time it is read through this dict.

    Reads through Python (``d[k]``, ``get``, ``values``, ``items``, ``pop`` …) return
    this dict's own copies; ``values()``/``items()`` copy every row first. C-level
    readers that bypass the methods (pydantic's serializer, ``json``) see the shared
    rows of untouched keys, which equal their copies. Copies and pickles are plain
    ``dict``s. Not thread-safe (one episode, one caller at a time), like the rest of τ².
    """

    __slots__ = ("_copy_row", "_owned")

    def __init__(self, shared: dict[Any, Any], copy_row: Callable[[Any], Any]) -> None:
        super().__init__(shared)
        self._copy_row = copy_row
        self._owned: set[Any] = set()

    def _own(self, key: Any) -> None:
        if key not in self._owned and dict.__contains__(self, key):
            dict.__setitem__(self, key, self._copy_row(key))
            self._owned.add(key)

    def _own_all(self) -> None:
        if len(self._owned) < len(self):
            for key in list(dict.keys(self)):
                self._own(key)

    def __getitem__(self, key: Any) -> Any:
        self._own(key)
        return dict.__getitem__(self, key)

    def get(self, key: Any, default: Any = None) -> Any:
        self._own(key)
        return dict.get(self, key, default)

    def __setitem__(self, key: Any, value: Any) -> None:
        dict.__setitem__(self, key, value)
        self._owned.add(key)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self._own(key)
        self._owned.add(key)
        return dict.setdefault(self, key, default)

    def pop(self, key: Any, *default: Any) -> Any:
        self._own(key)
        self._owned.discard(key)
        return dict.pop(self, key, *default)

    def popitem(self) -> tuple[Any, Any]:
        if self:
            self._own(next(reversed(dict.keys(self))))
        key, value = dict.popitem(self)
        self._owned.discard(key)
        return key, value

    def update(self, *args: Any, **kwargs: Any) -> None:
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def values(self):
        self._own_all()
        return dict.values(self)

    def items(self):
        self._own_all()
        return dict.items(self)

    def copy(self) -> dict[Any, Any]:
        self._own_all()
        return dict(dict.items(self))

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[Any, Any]:
        return {key: copy.deepcopy(value, memo) for key, value in self.items()}

    def __reduce_ex__(self, protocol: Any) -> Any:
        return (dict, (self.copy(),))

    def __or__(self, other: Any) -> dict[Any, Any]:
        return self.copy() | other

    def __ior__(self, other: Any) -> CopyOnAccessDict:
        self.update(other)
        return self


class _Pristine:
    """One domain's validated database, its rows pickled on demand for cheap copies."""

    def __init__(self, domain: str, constructor: Callable[..., Any]) -> None:
        self.constructor = constructor
        self.db = constructor().tools.db
        self._collections = [
            name for name in type(self.db).model_fields if isinstance(getattr(self.db, name), dict)
        ]
        self._pickles: dict[str, dict[Any, bytes]] = {name: {} for name in self._collections}
        self._row_json: dict[str, tuple[list[Any], dict[Any, bytes]]] = {}
        self._lock = threading.Lock()

    def _copier(self, name: str) -> Callable[[Any], Any]:
        rows = getattr(self.db, name)
        pickles = self._pickles[name]

        def copy_row(key: Any) -> Any:
            # A row's pickle is made once per process; loading it is 2–3× faster than
            # deepcopy or model_copy(deep=True) and gives an equal, unshared row. These
            # bytes never leave the process.
            data = pickles.get(key)
            if data is None:
                data = pickles[key] = pickle.dumps(rows[key], pickle.HIGHEST_PROTOCOL)
            return pickle.loads(data)  # noqa: S301 - our own bytes, made just above

        return copy_row

    def new_environment(self) -> Any:
        update = {
            name: CopyOnAccessDict(getattr(self.db, name), self._copier(name))
            for name in self._collections
        }
        # A shallow copy: the new database shares nothing mutable with the pristine one
        # but the rows, which the CopyOnAccessDicts never hand out.
        environment = self.constructor(db=self.db.model_copy(update=update))
        tools = environment.tools
        if self._str_keys and getattr(tools, "__dict__", None) is not None:
            tools.get_db_hash = lambda: self.db_hash(tools.db)
        return environment

    @functools.cached_property
    def _str_keys(self) -> bool:
        return all(
            isinstance(key, str) for name in self._collections for key in getattr(self.db, name)
        )

    def _pieces(self, name: str) -> tuple[list[Any], dict[Any, bytes]]:
        """Collection ``name``'s pristine keys in sorted order, and each pristine row as
        ``"key": row`` exactly as τ²'s hash serialises it (both made once, under a lock:
        64 sessions scoring at once must not all build them)."""
        found = self._row_json.get(name)
        if found is None:
            with self._lock:
                found = self._row_json.get(name)
                if found is None:
                    rows = getattr(self.db, name)
                    pieces = {
                        key: _json(key) + b": " + _json(rows[key].model_dump()) for key in rows
                    }
                    found = self._row_json[name] = (sorted(rows), pieces)
        return found

    def db_hash(self, db: Any) -> str:
        """τ²'s ``get_dict_hash(db.model_dump())``, byte for byte, without serialising the
        rows this environment never touched again: sha256 of ``json.dumps(dump,
        sort_keys=True, default=str)``, assembled from pieces, the pristine rows' pieces
        made once per process. Any field that is not one of our copy-on-access
        collections is serialised as τ² does."""
        parts = []
        for name in sorted(type(db).model_fields):
            value = getattr(db, name)
            if name not in self._collections or not isinstance(value, CopyOnAccessDict):
                parts.append(_json(name) + b": " + _json(db.model_dump(include={name})[name]))
                continue
            shared = getattr(self.db, name)
            order, pieces = self._pieces(name)
            if len(value) != len(order) or any(k not in pieces for k in value._owned):
                order = sorted(dict.keys(value))  # rows were added or removed
            rows = []
            for key in order:
                row = dict.__getitem__(value, key)
                piece = pieces.get(key) if row is shared.get(key) else None
                rows.append(
                    piece if piece is not None else _json(key) + b": " + _json(row.model_dump())
                )
            parts.append(_json(name) + b": {" + b", ".join(rows) + b"}")
        return hashlib.sha256(b"{" + b", ".join(parts) + b"}").hexdigest()


def _json(value: Any) -> bytes:
    """``json.dumps`` as τ²'s ``get_dict_hash`` calls it."""
    return json.dumps(value, sort_keys=True, default=str).encode()


class _WholePristine:
    """A domain whose database is not a set of row dicts (telecom's are lists): its
    databases — the agent's and, when the constructor takes one, the customer's — loaded
    and validated once; each environment gets its own unpickled copies of both (0.3 ms
    instead of τ²'s 4 ms of TOML parsing and validation)."""

    def __init__(self, constructor: Callable[..., Any]) -> None:
        self.constructor = constructor
        environment = constructor()
        self._db = pickle.dumps(environment.tools.db, pickle.HIGHEST_PROTOCOL)
        user_tools = getattr(environment, "user_tools", None)
        self._user_db = (
            pickle.dumps(user_tools.db, pickle.HIGHEST_PROTOCOL)
            if user_tools is not None and _takes(constructor, "user_db")
            else None
        )

    def new_environment(self) -> Any:
        kwargs = {"db": pickle.loads(self._db)}  # noqa: S301 - our own bytes
        if self._user_db is not None:
            kwargs["user_db"] = pickle.loads(self._user_db)  # noqa: S301 - our own bytes
        return self.constructor(**kwargs)


def _takes(constructor: Callable[..., Any], name: str) -> bool:
    try:
        return name in inspect.signature(constructor).parameters
    except (TypeError, ValueError):
        return False


_pristine: dict[str, _Pristine | _WholePristine | None] = {}
_locks: dict[str, threading.Lock] = {}
_locks_lock = threading.Lock()


def _pristine_for(domain: str) -> _Pristine | _WholePristine | None:
    """The domain's pristine database, built once (``None``: τ²'s constructor each time)."""
    if domain in _pristine:
        return _pristine[domain]
    with _locks_lock:
        lock = _locks.setdefault(domain, threading.Lock())
    with lock:
        if domain not in _pristine:
            constructor = compat.tau2_constructor(domain)
            pristine: _Pristine | _WholePristine | None = None
            if _takes(constructor, "db"):
                candidate = _Pristine(domain, constructor)
                rows_are_models = candidate._collections and all(
                    isinstance(getattr(candidate.db, name), dict)
                    and all(isinstance(v, BaseModel) for v in getattr(candidate.db, name).values())
                    for name in type(candidate.db).model_fields
                )
                pristine = candidate if rows_are_models else _WholePristine(constructor)
            _pristine[domain] = pristine
        return _pristine[domain]


def fresh_environment(domain: str) -> Any:
    """A new τ² ``Environment`` of ``domain``, as τ²'s constructor would build it.

    Never the same object or the same mutable rows twice. The first call per domain
    (or :func:`warm`) pays for validating the database once. Raises what τ²'s registry
    raises for an unknown domain.
    """
    pristine = _pristine_for(domain)
    if pristine is None:
        return compat.tau2_constructor(domain)()
    return pristine.new_environment()


@contextlib.contextmanager
def fresh_environments_for_tau2(domain: str) -> Iterator[None]:
    """Inside this block, τ² code of this thread (or task) that builds ``domain``'s
    environment through its registry with no arguments but ``solo_mode=False`` — its
    evaluator builds two per score — gets :func:`fresh_environment` instead of
    re-validating the database. Other threads, and every other call, get τ²'s own
    constructor unchanged (through :func:`tau2_env.llm.compat.tau2_environments_from`).
    """

    def build(asked: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        plain = not args and not kwargs.get("solo_mode") and set(kwargs) <= {"solo_mode"}
        return fresh_environment(asked) if plain and asked == domain else None

    with compat.tau2_environments_from(build):
        yield


def warm(domains: Iterable[str]) -> None:
    """Validate the databases of ``domains`` now, so no reset pays for it."""
    for domain in domains:
        _pristine_for(domain)


def warm_in_background(domains: Iterable[str]) -> threading.Thread:
    """:func:`warm` in a daemon thread (errors surface later, at the first reset)."""

    domains = list(domains)

    def run() -> None:
        # A failure here is raised again by the first reset that needs the domain.
        with contextlib.suppress(Exception):
            warm(domains)

    thread = threading.Thread(target=run, name="tau2-warm", daemon=True)
    thread.start()
    return thread
