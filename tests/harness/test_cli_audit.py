"""``provnet audit``: exit status, printed table, Markdown output, bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "experiments" / "examples"


def test_audit_dangerous_exits_one_and_prints_critical(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["audit", str(EXAMPLES / "audit-dangerous.yaml")]) == 1
    out = capsys.readouterr().out
    assert "issue_refund" in out
    assert "2 CRITICAL" in out


def test_audit_healthy_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["audit", str(EXAMPLES / "audit-healthy.yaml"), "--strict"]) == 0
    assert "healthy: none of 4 gates is starved" in capsys.readouterr().out


def test_audit_md_writes_markdown_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    md = tmp_path / "sub" / "audit.md"
    assert main(["audit", str(EXAMPLES / "audit-part5.yaml"), "--md", str(md)]) == 1
    text = md.read_text(encoding="utf-8")
    assert text.startswith("# Starvation audit: Part 5")
    assert text.count("\n| ") == 10  # header + nine gates
    assert f"wrote {md}" in capsys.readouterr().out


def test_audit_bad_spec_exits_two_with_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text("compaction: {score_aggregates: 1}\ngates: []\n", encoding="utf-8")
    assert main(["audit", str(spec)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"provnet: error: {spec}:1: compaction.score_aggregates:")
    assert "Traceback" not in err
    assert err.count("\n") == 1
