"""Random bytes from the operating system's CSPRNG, read in blocks.

A holder draws a fresh 128-bit nonce for every demand and a node a request
id for every call it serves: one ``os.urandom`` system call each, on the
hot path of every demand (measured by sampling the serve benchmark's two
processes, the two calls were as much time as a third of one Ed25519
signature there). :func:`random_bytes` hands out slices of a block read
with one ``os.urandom`` call instead: the same kernel CSPRNG output, one
system call per :data:`BLOCK_BYTES`.

No slice is ever handed out twice: each thread has its own block (nothing
to lock), and a child process made by ``fork`` drops what it inherited
(``os.register_at_fork``), so parent and child never share a byte.
"""

from __future__ import annotations

import os
import threading

__all__ = ["BLOCK_BYTES", "random_bytes"]

#: Bytes read from the operating system at a time (per thread).
BLOCK_BYTES = 4096


class _Block(threading.local):
    """This thread's unread random bytes: ``data[at:]``."""

    def __init__(self) -> None:
        self.data = b""
        self.at = 0
        self.generation = -1


_block = _Block()
#: Bumped in a child after fork: every block read before it is dropped there.
_generation = 0


def _after_fork_in_child() -> None:
    global _generation
    _generation += 1


if hasattr(os, "register_at_fork"):  # POSIX
    os.register_at_fork(after_in_child=_after_fork_in_child)


def random_bytes(n: int) -> bytes:
    """``n`` bytes from the OS CSPRNG (``os.urandom``), never handed out before."""
    if not 0 < n <= BLOCK_BYTES:
        raise ValueError(f"random_bytes: 1..{BLOCK_BYTES} bytes, got {n}")
    block = _block
    at = block.at
    end = at + n
    if end > len(block.data) or block.generation != _generation:
        block.data = os.urandom(BLOCK_BYTES)
        block.generation = _generation
        at, end = 0, n
    block.at = end
    return block.data[at:end]
