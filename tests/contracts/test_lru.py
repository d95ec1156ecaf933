"""contracts._lru.BoundedCache: the order entries leave in, the bounds, the counter."""

from __future__ import annotations

from pathlib import Path

import pytest

from contracts._lru import BoundedCache


def test_the_oldest_entry_is_evicted_first_and_counted() -> None:
    cache: BoundedCache[str, int] = BoundedCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("c", 3)
    assert ("a" in cache, "b" in cache, "c" in cache) == (False, True, True)
    assert len(cache) == 2
    assert cache.evicted == 1


def test_get_refreshes_so_the_other_entry_is_evicted() -> None:
    cache: BoundedCache[str, int] = BoundedCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1
    cache.put("c", 3)
    assert "a" in cache
    assert "b" not in cache


def test_touch_refreshes_and_says_whether_the_key_is_kept() -> None:
    cache: BoundedCache[str, None] = BoundedCache(2)
    cache.put("a", None)
    cache.put("b", None)
    assert cache.touch("a") is True
    assert cache.touch("z") is False
    cache.put("c", None)
    assert sorted(k for k in "abc" if k in cache) == ["a", "c"]


def test_peek_and_membership_leave_the_order_alone() -> None:
    cache: BoundedCache[str, int] = BoundedCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.peek("a") == 1
    assert "a" in cache
    cache.put("c", 3)
    assert "a" not in cache  # still the oldest: a FIFO memory stays FIFO
    assert cache.peek("missing") is None
    assert cache.get("missing") is None


def test_putting_a_key_again_replaces_it_refreshes_it_and_is_no_eviction() -> None:
    cache: BoundedCache[str, int] = BoundedCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 10)
    assert (len(cache), cache.evicted) == (2, 0)
    cache.put("c", 3)
    assert cache.peek("a") == 10
    assert "b" not in cache
    assert cache.evicted == 1


def test_weight_bound_evicts_oldest_but_never_the_entry_just_put() -> None:
    cache: BoundedCache[str, bytes] = BoundedCache(None, maxweight=10, weigh=len)
    cache.put("a", b"x" * 4)
    cache.put("b", b"x" * 4)
    assert (cache.weight, cache.evicted) == (8, 0)
    cache.put("c", b"x" * 4)  # 12 > 10: "a" leaves
    assert ("a" in cache, cache.weight, cache.evicted) == (False, 8, 1)
    cache.put("big", b"x" * 50)  # heavier than the bound: kept alone
    assert (len(cache), cache.weight, cache.evicted) == (1, 50, 3)
    cache.put("big", b"x" * 2)  # replaced: its old weight is given back
    assert cache.weight == 2


def test_on_evict_sees_each_evicted_entry_in_order() -> None:
    gone: list[tuple[int, str]] = []
    cache: BoundedCache[int, str] = BoundedCache(3, on_evict=lambda k, v: gone.append((k, v)))
    for i in range(6):
        cache.put(i, str(i))
    assert gone == [(0, "0"), (1, "1"), (2, "2")]
    assert cache.evicted == 3
    assert [k for k in range(6) if k in cache] == [3, 4, 5]


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"maxsize": None}, "needs maxsize, maxweight or both"),
        ({"maxsize": 0}, "maxsize must be at least 1"),
        ({"maxsize": None, "maxweight": 5}, "comes with a weigh function"),
    ],
)
def test_a_cache_without_a_usable_bound_is_refused(kwargs: dict[str, object], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        BoundedCache(**kwargs)  # type: ignore[arg-type]


def test_no_package_module_keeps_a_hand_rolled_recency_cache() -> None:
    # The helper is the one home of "oldest first out": a module that needs a
    # bounded memo uses it (or functools.lru_cache), and a policy that is not
    # oldest-first (nodes.held, nodes.replay, nodes.auth) needs no OrderedDict.
    root = Path(__file__).resolve().parents[2]
    helper = root / "contracts" / "_lru.py"
    offenders = [
        f"{path.relative_to(root)}: {word}"
        for package in ("contracts", "nodes", "harness")
        for path in sorted((root / package).rglob("*.py"))
        if path != helper and "_pb" not in path.parts
        for word in (
            "OrderedDict",
            "move_to_end",
            "popitem(last=False)",
            "pop(next(iter(",  # a dict used as a FIFO: the oldest key dropped
            "[next(iter(",
            "(next(iter(self.",
        )
        if word in path.read_text(encoding="utf-8")
    ]
    assert offenders == []


def test_pop_removes_gives_back_its_weight_and_is_no_eviction() -> None:
    cache: BoundedCache[str, bytes] = BoundedCache(3, maxweight=100, weigh=len)
    cache.put("a", b"xyz")
    cache.put("b", b"xy")
    assert cache.pop("a") == b"xyz"
    assert cache.pop("a") is None
    assert (len(cache), cache.weight, cache.evicted) == (1, 2, 0)


def test_iteration_is_oldest_first_and_refreshes_nothing() -> None:
    cache: BoundedCache[str, int] = BoundedCache(3)
    for key, value in (("a", 1), ("b", 2), ("c", 3)):
        cache.put(key, value)
    cache.get("a")
    assert list(cache) == ["b", "c", "a"]
    assert list(cache.items()) == [("b", 2), ("c", 3), ("a", 1)]
    cache.put("d", 4)
    assert list(cache) == ["c", "a", "d"]
