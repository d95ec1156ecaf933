"""Children that play a foreground Ctrl-C.

A process a non-interactive shell starts in the background (``cmd &``)
inherits SIGINT ignored, and Python then installs no ``KeyboardInterrupt``
handler in it or in anything it starts. The tests that send SIGINT stand for
a user pressing Ctrl-C at a terminal, so their child starts with SIGINT's
default disposition whatever the test runner inherited.
"""

from __future__ import annotations

import signal


def sigint_default() -> None:
    """``preexec_fn`` for a child that must act on SIGINT as a foreground job does."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
