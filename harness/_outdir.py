"""Results folders that are never half-written or mixed (guarantees below).

A run, a sweep or a boundary run writes into a fresh hidden sibling folder
(``.NAME.partial-…`` next to ``--out``) and renames it into place only when
every file is complete:

- an interrupted or failed run removes its partial folder and leaves the
  previous results untouched;
- the new folder replaces the old one whole, so a later run never leaves its
  files beside an earlier run's;
- a folder is only replaced if it is empty or holds nothing but results
  files (an ``--out`` pointing at a folder with other files is refused, so a
  typo cannot delete someone's work).

The run's meta file lists the SHA-256 of every file written
(:func:`file_digests`); ``report`` checks them (:func:`check_digests`) and
refuses a folder whose files come from different runs.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.cli_errors import UsageError

__all__ = ["RESULT_FILES", "check_digests", "file_digests", "staged_dir"]

#: Files a results folder may hold (provnet's and the lab's) besides figures.
RESULT_FILES = frozenset(
    {
        "gate_metrics.csv",
        "drift.csv",
        "recon_curve.csv",
        "prose_channel.csv",
        "death_spiral_decisions.csv",
        "run_meta.json",
        "trace_coverage.json",
        "sweep_metrics.csv",
        "sweep_meta.json",
        "summary.md",
        "boundary_costs.csv",
        "boundary_decisions.csv",
        "boundary_evidence.csv",
        "boundary_meta.json",
        "boundary_gates.csv",
        "boundary_rtt.csv",
        "boundary_rtt.json",
        "custody_availability.csv",
        "custody_evidence.csv",
        "custody_price.csv",
        "custody_meta.json",
        "custody_split_view.csv",
        "custody_death_spiral.csv",
        "evidence",
    }
)


def _foreign(out: Path) -> list[str]:
    """Entries of ``out`` that are not results files."""
    return sorted(
        p.name
        for p in out.iterdir()
        if p.name not in RESULT_FILES and not (p.is_file() and p.suffix in (".png", ".md"))
    )


@contextmanager
def staged_dir(out: Path) -> Iterator[Path]:
    """Yield a fresh folder to write into; rename it to ``out`` on success.

    Raises :class:`UsageError` (before anything runs) when ``out`` cannot be
    created or replaced. On any exception — KeyboardInterrupt included —
    the partial folder is removed and ``out`` is left as it was.
    """
    if out.exists():
        if not out.is_dir():
            raise UsageError(f"{out}: exists and is not a directory (expected a results folder)")
        foreign = _foreign(out)
        if foreign:
            raise UsageError(
                f"{out}: holds files that are not results ({', '.join(foreign[:3])}"
                f"{', …' if len(foreign) > 3 else ''}); choose another --out or empty it"
            )
    parent = out.absolute().parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=parent))
    except OSError as exc:
        raise UsageError(
            f"{out}: cannot create the results directory ({exc.strerror or exc})"
        ) from None
    try:
        yield partial
        os.chmod(partial, 0o777 & ~_umask())
        old: Path | None = None
        if out.exists():
            # same parent: the swap is two renames, the old folder is removed last
            old = partial.with_name(partial.name.replace(".partial-", ".old-", 1))
            os.rename(out, old)
        try:
            os.rename(partial, out)
        except OSError:
            if old is not None:
                os.rename(old, out)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def file_digests(folder: Path, names: Iterable[str]) -> dict[str, str]:
    """SHA-256 of each named file in ``folder`` (recorded in the run's meta file)."""
    return {name: _sha256(folder / name) for name in names}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_digests(folder: Path, meta_name: str, digests: object) -> None:
    """Refuse a folder whose files are not the ones its meta file recorded.

    ``digests`` is the meta file's ``files`` entry; folders written by the
    lab carry none and are accepted as they are.
    """
    if digests is None:
        return
    if not isinstance(digests, dict):
        raise UsageError(f"{folder / meta_name}: 'files' must map file names to SHA-256 digests")
    for name, expected in sorted(digests.items()):
        path = folder / str(name)
        if not path.is_file():
            raise UsageError(
                f"{path}: missing, but {meta_name} records it; the folder is incomplete"
                " (rerun the command that writes it)"
            )
        if _sha256(path) != expected:
            raise UsageError(
                f"{path}: not the file the run in {meta_name} wrote (its SHA-256 differs):"
                " the folder mixes files from different runs; rerun the command that writes it"
            )
