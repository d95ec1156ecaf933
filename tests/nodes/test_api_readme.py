"""The README's library example is the code this test runs, so the two cannot drift.

The block is read from its section of ``README.md`` and played as a fresh
script in an empty directory (its node data dirs are relative), in its own
process, as a user who pasted it would run it; what it prints must be the
two lines the README says it prints.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SECTION = "## Your own agent: the library API"


def readme_example() -> str:
    text = README.read_text(encoding="utf-8")
    assert SECTION in text, f"{README}: section {SECTION!r} is gone"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    assert "```python\n" in section, f"{README}: {SECTION!r} has no python block"
    return section.split("```python\n", 1)[1].split("```", 1)[0]


def test_readme_example_is_short() -> None:
    lines = [line for line in readme_example().splitlines() if line.strip()]
    assert len(lines) <= 22, f"{len(lines)} lines"


def test_readme_example_runs_and_prints_what_the_readme_says(tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(readme_example(), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,  # bounded; subprocess.run kills the example past it
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    said = [line for line in done.stdout.splitlines() if line.startswith("B ")]
    assert said == ["B verified 3 hops from A", "B holds bad_data proof against T: True"]
    text = README.read_text(encoding="utf-8").split(SECTION, 1)[1]
    for line in said:
        assert f"`{line}`" in text, f"the README does not say it prints {line!r}"
