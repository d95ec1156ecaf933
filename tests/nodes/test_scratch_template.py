"""A new scratch store starts from the schema's file: the same schema as a store
created statement by statement, and its own origin."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from nodes.store import DB_FILENAME, HopStore, StoreMode


def _schema(path: Path) -> list[tuple[str, str, str]]:
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
        return [(str(a), str(b), str(c)) for a, b, c in rows]
    finally:
        conn.close()


def test_scratch_stores_have_the_durable_schema_and_each_its_origin(tmp_path: Path) -> None:
    a, b = "a" * 64, "b" * 64

    async def main() -> list[str]:
        origins = []
        for name, origin, mode in (
            ("durable", a, StoreMode.DURABLE),
            ("scratch-a", a, StoreMode.SCRATCH),
            ("scratch-b", b, StoreMode.SCRATCH),
        ):
            store = await HopStore.open(tmp_path / name, origin, mode=mode)
            origins.append(store.origin)
            await store.close()
        # reopened: the log it wrote, not a fresh one
        again = await HopStore.open(tmp_path / "scratch-b", b, mode=StoreMode.SCRATCH)
        origins.append(again.origin)
        await again.close()
        return origins

    assert asyncio.run(main()) == [a, a, b, b]
    durable = _schema(tmp_path / "durable" / DB_FILENAME)
    assert any(name == "meta" for _, name, _ in durable)
    for name in ("scratch-a", "scratch-b"):
        assert _schema(tmp_path / name / DB_FILENAME) == durable
    conn = sqlite3.connect(tmp_path / "scratch-b" / DB_FILENAME)
    try:
        meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
    finally:
        conn.close()
    assert meta["origin"] == b
