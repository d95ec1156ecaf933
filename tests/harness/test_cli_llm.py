"""``provnet experiment run --llm …`` end to end against a loopback server."""

from __future__ import annotations

import csv
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.cli import main
from harness.metrics import PROSE_COLUMNS
from tests.harness._llm_server import KEY, FakeLLM, Refuse, Status

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The default answer cache lives under XDG_CACHE_HOME: keep it in the test's folder."""
    monkeypatch.delenv("PROVNET_LLM_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    server = FakeLLM().start()
    try:
        yield server
    finally:
        server.stop()


def _config(tmp_path: Path, extra: str = "") -> Path:
    cfg = tmp_path / "llm.yaml"
    cfg.write_text(
        "steps: 60\ncompaction_cadence: [25]\nseeds: 1\ndeath_spiral_run: null\n" + extra
    )
    return cfg


def _run(tmp_path: Path, out: Path, *flags: str) -> int:
    return main(
        [
            "experiment",
            "run",
            "--config",
            str(_config(tmp_path)),
            "--out",
            str(out),
            "--no-progress",
            *flags,
        ]
    )


def _fingerprint(printed: str) -> str:
    (line,) = [x for x in printed.splitlines() if x.startswith("fingerprint:")]
    return line.split()[1]


def _prose_rows(out: Path) -> list[dict[str, str]]:
    with (out / "prose_channel.csv").open() as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_llm_run_records_the_channel_and_a_rerun_makes_no_http_call(
    fake: FakeLLM,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    provider: str,
) -> None:
    monkeypatch.setenv(f"{provider.upper()}_API_KEY", KEY)
    out = tmp_path / "results"
    flags = ["--llm", provider, "--llm-model", "test-model", "--llm-base-url", fake.base_url]
    assert _run(tmp_path, out, *flags) == 0
    printed = capsys.readouterr().out
    calls = len(fake.requests)
    assert calls > 0
    assert all(r.path.startswith("/v1/") and r.body["model"] == "test-model" for r in fake.requests)
    rows = _prose_rows(out)
    assert list(rows[0]) == PROSE_COLUMNS
    assert sum(int(r["n_llm_calls"]) for r in rows) == calls
    assert sum(int(r["n_parse_failures"]) for r in rows) == 0
    assert all(float(r["realized_taint_recall"]) == 1.0 for r in rows if int(r["n_true_taints"]))
    meta = json.loads((out / "run_meta.json").read_text())
    llm = meta["llm_channel"]
    assert (llm["provider"], llm["model"], llm["calls"]) == (provider, "test-model", calls)
    assert llm["parse_failures"] == 0
    assert llm["cache_dir"] == str(tmp_path / "xdg" / "provnet" / "llm")
    assert f"llm: {provider} test-model: {calls} calls" in printed

    # rerun: every answer from the cache — no request, no key needed, same decisions
    monkeypatch.delenv(f"{provider.upper()}_API_KEY")
    fake.stop()
    assert _run(tmp_path, out, *flags) == 0
    again = capsys.readouterr().out
    assert len(fake.requests) == calls
    assert _fingerprint(again) == _fingerprint(printed)
    meta2 = json.loads((out / "run_meta.json").read_text())["llm_channel"]
    assert meta2["calls"] == 0
    assert meta2["cache_hits"] == llm["calls"] + llm["cache_hits"]


def test_llm_run_counts_refusals_as_parse_failures(
    fake: FakeLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    fake.push(Refuse(), Refuse())
    out = tmp_path / "r"
    assert (
        _run(tmp_path, out, "--llm", "openai", "--llm-model", "m", "--llm-base-url", fake.base_url)
        == 0
    )
    rows = _prose_rows(out)
    failures = sum(int(r["n_parse_failures"]) for r in rows)
    # a refused request is cached like any answer: an equal state later is refused again
    assert failures >= 2
    assert sum(int(r["n_refusals"]) for r in rows) == failures
    meta = json.loads((out / "run_meta.json").read_text())["llm_channel"]
    assert meta["refusals"] == meta["parse_failures"] == failures
    # the report says which channel ran and what it cost
    assert main(["experiment", "report", "--out", str(out), "--sweep-out", str(tmp_path)]) == 0
    summary = (out / "summary.md").read_text()
    assert "Real summarize→extract channel (openai m)" in summary
    assert f"{meta['calls']} requests sent, {meta['cache_hits']} answers from the cache" in summary
    assert f"{failures} refusals (counted among the parse failures)" in summary


def test_budget_stops_before_the_next_call_with_one_error_line(
    fake: FakeLLM,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    out = tmp_path / "r"
    flags = ["--llm", "anthropic", "--llm-model", "m", "--llm-base-url", fake.base_url]
    assert _run(tmp_path, out, *flags, "--llm-budget", "3") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "Traceback" not in err
    assert err.startswith("provnet: error: LLM call budget of 3 reached: 3 calls made")
    assert len(fake.requests) == 3
    # the three answers are cached: a rerun with a larger budget continues from them
    assert _run(tmp_path, out, *flags, "--llm-budget", "1000") == 0
    meta = json.loads((out / "run_meta.json").read_text())["llm_channel"]
    assert meta["cache_hits"] >= 3
    assert meta["calls"] == len(fake.requests) - 3


def _error(capsys: pytest.CaptureFixture[str], tmp_path: Path, *flags: str) -> str:
    assert _run(tmp_path, tmp_path / "r", *flags) == 2
    err = capsys.readouterr().err
    assert err.startswith("provnet: error: "), err
    assert err.count("\n") == 1, err
    return err


def test_transport_failures_are_one_error_line(
    fake: FakeLLM,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    base = ["--llm", "openai", "--llm-model", "m", "--llm-retries", "0"]
    fake.push(Status(200, body=b"<html>"))
    assert "answer is not JSON" in _error(capsys, tmp_path, *base, "--llm-base-url", fake.base_url)
    fake.push(Status(429, {"retry-after": "1"}, {"error": {"message": "slow down"}}))
    err = _error(capsys, tmp_path, *base, "--llm-base-url", fake.base_url)
    assert "gave up after 1 attempts: HTTP 429: slow down" in err
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    assert "connection failed" in _error(capsys, tmp_path, *base, "--llm-base-url", closed)


def test_setup_errors_name_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    err = _error(capsys, tmp_path, "--llm", "openai")
    assert "no model named; pass --llm-model NAME or set prose.openai_model" in err
    assert "--llm-budget needs --llm openai|anthropic" in _error(
        capsys, tmp_path, "--llm-budget", "5"
    )
    err = _error(capsys, tmp_path, "--llm", "openai", "--llm-model", "m", "--llm-base-url", "x")
    assert "base URL 'x'" in err
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    err = _error(capsys, tmp_path, "--llm", "openai", "--llm-model", "m", "--llm-base-url", closed)
    assert "OPENAI_API_KEY is not set" in err


def test_default_run_never_loads_the_http_client(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "from harness.cli import main\n"
        f"rc = main(['experiment', 'run', '--config', {str(_config(tmp_path))!r}, "
        f"'--out', {str(tmp_path / 'r')!r}, '--no-progress', '--workers', '1'])\n"
        "assert rc == 0, rc\n"
        "assert 'httpx' not in sys.modules, 'httpx imported by a default run'\n"
        "assert 'harness.llm' not in sys.modules, 'harness.llm imported by a default run'\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    meta = json.loads((tmp_path / "r" / "run_meta.json").read_text())
    assert "llm_channel" not in meta
    rows = _prose_rows(tmp_path / "r")
    assert {r["n_llm_calls"] for r in rows} == {"0"}
