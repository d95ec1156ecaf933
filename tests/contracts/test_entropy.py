"""Random bytes read from the OS in blocks (:mod:`contracts.entropy`): never handed out twice.

Demand nonces and request ids come from :func:`contracts.entropy.random_bytes`,
slices of one ``os.urandom`` block per thread. A slice handed out twice would
be a repeated demand nonce (refused by the origin as a replay), so: no
overlap within a thread, across a refill, between threads, or between a
process and a child it forks.
"""

from __future__ import annotations

import os
import re
import threading

import pytest

from contracts import entropy
from contracts.entropy import BLOCK_BYTES, random_bytes
from contracts.serve import new_nonce


def test_slices_never_repeat_across_refills() -> None:
    # 3 blocks' worth of 16-byte draws: any reuse of a block's bytes shows as a repeat.
    draws = [random_bytes(16) for _ in range(3 * BLOCK_BYTES // 16 + 7)]
    assert all(len(d) == 16 for d in draws)
    assert len(set(draws)) == len(draws)


def test_a_draw_that_does_not_fit_the_block_left_takes_a_new_block() -> None:
    random_bytes(BLOCK_BYTES - 3)  # leaves 3 bytes (or fewer) in this thread's block
    a = random_bytes(8)
    b = random_bytes(8)
    assert len(a) == len(b) == 8
    assert a != b


def test_sizes_outside_a_block_are_refused() -> None:
    for n in (0, -1, BLOCK_BYTES + 1):
        with pytest.raises(ValueError, match="random_bytes"):
            random_bytes(n)


def test_threads_draw_from_their_own_blocks() -> None:
    out: list[list[bytes]] = [[] for _ in range(4)]

    def draw(i: int) -> None:
        out[i] = [random_bytes(16) for _ in range(600)]

    threads = [threading.Thread(target=draw, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    every = [d for per in out for d in per] + [random_bytes(16) for _ in range(600)]
    assert len(set(every)) == len(every)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX only")
def test_a_forked_child_never_draws_what_its_parent_will() -> None:
    random_bytes(16)  # the parent holds a partly used block now
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: report its next draws, then leave without cleanup
        try:
            os.write(write, b"".join(random_bytes(16) for _ in range(8)))
        finally:
            os._exit(0)
    os.close(write)
    child = b""
    while chunk := os.read(read, 4096):
        child += chunk
    os.close(read)
    os.waitpid(pid, 0)
    parent = b"".join(random_bytes(16) for _ in range(8))
    assert len(child) == len(parent) == 128
    child_draws = {child[i : i + 16] for i in range(0, 128, 16)}
    parent_draws = {parent[i : i + 16] for i in range(0, 128, 16)}
    assert not child_draws & parent_draws


def test_the_fork_hook_makes_a_block_stale() -> None:
    before = entropy._generation
    random_bytes(16)
    entropy._after_fork_in_child()  # what a child runs right after fork
    try:
        assert entropy._block.generation != entropy._generation
        random_bytes(16)
        assert entropy._block.generation == entropy._generation
        assert entropy._block.at == 16  # a fresh block, drawn from its start
    finally:
        assert entropy._generation == before + 1


def test_nonces_are_fresh_128_bit_hex() -> None:
    nonces = [new_nonce() for _ in range(1000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", n) for n in nonces)
    assert len(set(nonces)) == len(nonces)
