"""``$PROVNET_HOME``: the one directory a local cluster lives in.

Everything a local cluster writes goes under one root, so that a cluster can
be inspected, archived or removed as a unit, and tests can point the whole
thing at a temporary directory::

    $PROVNET_HOME/
      cluster.json            state of the running cluster (names, pids, ports)
      nodes/<name>/           a node's data dir: its key file and hop-log database
      logs/<name>.log         a node's structlog JSON lines (stdout + stderr)
      evidence/               evidence files written by ``provnet cluster smoke``
      smoke/<run-id>/         the smoke test's own extra nodes (data dirs, logs)

The root is ``--home`` if given, else ``$PROVNET_HOME``, else ``./.provnet``
(relative to the working directory, so a checkout keeps its cluster beside
it; the repository ignores that path).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DEFAULT_HOME",
    "HOME_ENV",
    "NODE_NAME_RE",
    "NODE_NAME_RULE",
    "Home",
    "HomeError",
    "check_node_name",
]


class HomeError(ValueError):
    """The provnet home cannot be used; the message names the path and the fix."""


#: Environment variable naming the cluster root.
HOME_ENV = "PROVNET_HOME"
#: Root used when neither ``--home`` nor ``$PROVNET_HOME`` is set.
DEFAULT_HOME = Path(".provnet")

#: The one rule for node names, wherever a name is given (``provnet node --name``,
#: peers, ``cluster up --names``, ``--nodes``): a label and a directory name.
NODE_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
#: :data:`NODE_NAME_RE` in words, for error messages.
NODE_NAME_RULE = (
    "lower-case letters, digits, '_' and '-', starting with a letter or digit,"
    " at most 32 characters"
)


def check_node_name(name: str) -> str:
    """Return ``name`` if it is usable as a node label and a directory name.

    Raises ``ValueError`` naming the value otherwise (:data:`NODE_NAME_RULE`).
    """
    if not NODE_NAME_RE.fullmatch(name):
        raise ValueError(f"node name {name!r} is not usable: expected {NODE_NAME_RULE}")
    return name


@dataclass(frozen=True, slots=True)
class Home:
    """Paths of one ``$PROVNET_HOME`` (nothing is created until asked)."""

    root: Path

    @classmethod
    def resolve(
        cls, explicit: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None
    ) -> Home:
        """``explicit`` if given, else ``$PROVNET_HOME``, else ``./.provnet``; made absolute."""
        environ = os.environ if env is None else env
        if explicit is not None and str(explicit):
            raw = Path(explicit)
        elif environ.get(HOME_ENV):
            raw = Path(environ[HOME_ENV])
        else:
            raw = DEFAULT_HOME
        return cls(raw.expanduser().absolute())

    @property
    def state_file(self) -> Path:
        return self.root / "cluster.json"

    @property
    def nodes_dir(self) -> Path:
        return self.root / "nodes"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def evidence_dir(self) -> Path:
        return self.root / "evidence"

    @property
    def smoke_dir(self) -> Path:
        return self.root / "smoke"

    def data_dir(self, name: str) -> Path:
        """The data dir (keys, database) of cluster node ``name``."""
        return self.nodes_dir / check_node_name(name)

    def log_file(self, name: str) -> Path:
        """The log file of cluster node ``name``."""
        return self.logs_dir / f"{check_node_name(name)}.log"

    def ensure(self) -> None:
        """Create the root and its fixed subdirectories (owner-only access).

        Raises :class:`HomeError` naming the path when it cannot be created
        or written (a file in the way, no permission).
        """
        for path in (self.root, self.nodes_dir, self.logs_dir, self.evidence_dir):
            try:
                path.mkdir(mode=0o700, parents=True, exist_ok=True)
            except OSError as exc:
                raise HomeError(
                    f"PROVNET_HOME {self.root}: cannot create {path} ({exc.strerror or exc});"
                    " choose a writable directory with --home or PROVNET_HOME"
                ) from None
        if not os.access(self.root, os.W_OK | os.X_OK):
            raise HomeError(
                f"PROVNET_HOME {self.root}: not writable; choose a writable directory"
                " with --home or PROVNET_HOME"
            )
