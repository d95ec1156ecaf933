"""The SQLite connections a :class:`nodes.store.HopStore` runs its statements on.

Two kinds behind one structural type (:class:`Db`):

- **threaded** — ``aiosqlite.Connection``: every statement is handed to the
  connection's own thread and its result handed back to the event loop. A
  slow disk (an fsync under load) never stalls the loop: what a deployed
  node needs while it serves other calls.
- **in-loop** — :class:`InLoopConnection`: the statement runs at once on the
  calling (event-loop) thread through the standard :mod:`sqlite3` module.
  No hand-off — each one costs two thread switches and, on a loaded
  machine, a wait for a core — but a slow statement blocks the loop while
  it runs. Meant for stores whose medium answers in microseconds (tmpfs)
  and whose node serves nobody else: the boundary experiment's in-process
  nodes (:class:`nodes.store.StoreMode`).

Both run the same SQL with the same isolation (``isolation_level=None``:
the store issues ``BEGIN``/``COMMIT`` itself) and raise the same
:mod:`sqlite3` exceptions, which the store translates. An in-loop
connection used after :meth:`InLoopConnection.close` raises ``ValueError``
("Connection closed"), as aiosqlite does.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol, cast

__all__ = ["Cursor", "Db", "InLoopConnection", "InLoopCursor"]


class Cursor(Protocol):
    """What the store reads of a cursor ``execute`` returned."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Awaitable[Any]: ...

    def fetchmany(self, size: int) -> Awaitable[Iterable[Any]]: ...

    def __aiter__(self) -> AsyncIterator[Any]: ...


class Db(Protocol):
    """The statements the store issues on a connection (aiosqlite's signatures)."""

    def execute(self, sql: str, parameters: Iterable[Any] | None = None) -> Awaitable[Cursor]: ...

    def execute_fetchall(
        self, sql: str, parameters: Iterable[Any] | None = None
    ) -> Awaitable[Iterable[Any]]: ...

    def executemany(self, sql: str, parameters: Iterable[Iterable[Any]]) -> Awaitable[Any]: ...

    def set_trace_callback(self, handler: Callable[..., Any]) -> Awaitable[None]: ...

    def close(self) -> Awaitable[None]: ...


def _params(parameters: Iterable[Any] | None) -> tuple[Any, ...]:
    if parameters is None:
        return ()
    return parameters if isinstance(parameters, tuple) else tuple(parameters)


class InLoopCursor:
    """A :mod:`sqlite3` cursor behind the awaitable calls of an aiosqlite cursor."""

    __slots__ = ("_cursor",)

    def __init__(self, cursor: sqlite3.Cursor) -> None:
        self._cursor = cursor

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    async def fetchone(self) -> Any:
        return self._cursor.fetchone()

    async def fetchall(self) -> list[Any]:
        return self._cursor.fetchall()

    async def fetchmany(self, size: int) -> list[Any]:
        return self._cursor.fetchmany(size)

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._rows()

    async def _rows(self) -> AsyncIterator[Any]:
        while True:
            rows = self._cursor.fetchmany(256)
            if not rows:
                return
            for row in rows:
                yield row


class InLoopConnection:
    """A :mod:`sqlite3` connection whose statements run on the calling thread.

    Same call shapes as ``aiosqlite.Connection`` for what the store uses
    (see the module docstring for when this is the right choice).
    """

    __slots__ = ("_conn",)

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn: sqlite3.Connection | None = conn

    @classmethod
    async def connect(cls, path: Path) -> InLoopConnection:
        # The loop thread opens and uses it; nothing else ever touches it.
        return cls(sqlite3.connect(path, isolation_level=None, check_same_thread=True))

    def _live(self) -> sqlite3.Connection:
        if self._conn is None:
            raise ValueError("Connection closed")
        return self._conn

    async def execute(self, sql: str, parameters: Iterable[Any] | None = None) -> InLoopCursor:
        return InLoopCursor(self._live().execute(sql, _params(parameters)))

    async def execute_fetchall(
        self, sql: str, parameters: Iterable[Any] | None = None
    ) -> list[Any]:
        return self._live().execute(sql, _params(parameters)).fetchall()

    async def executemany(self, sql: str, parameters: Iterable[Iterable[Any]]) -> InLoopCursor:
        rows = cast("Iterable[Sequence[Any]]", parameters)
        return InLoopCursor(self._live().executemany(sql, rows))

    async def set_trace_callback(self, handler: Callable[..., Any]) -> None:
        self._live().set_trace_callback(handler)

    @property
    def in_transaction(self) -> bool:
        return self._live().in_transaction

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
