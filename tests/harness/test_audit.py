"""Starvation audit: verdicts per read/polarity and spec validation errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.audit import (
    AuditSpecError,
    Failure,
    Read,
    Severity,
    audit,
    load_spec,
    render_markdown,
    render_table,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "experiments" / "examples"

_HEALTHY_COMPACTION = """\
compaction:
  score_aggregates: true
  taint_ids: true
  lineage_window: 8
  ordering_preserved: true
"""


def _write(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _one_gate(
    tmp_path: Path,
    *,
    compaction: str = _HEALTHY_COMPACTION,
    reads: str = "[taint_ids]",
    window: str | None = None,
    polarity: str = "allow",
    irreversible: str = "false",
) -> Path:
    gate = f"  - name: g\n    reads: {reads}\n    polarity: {polarity}\n"
    gate += f"    irreversible: {irreversible}\n"
    if window is not None:
        gate += f"    window: {window}\n"
    return _write(tmp_path, compaction + "gates:\n" + gate)


def test_part5_spec_predicts_measured_polarity_blocklist_proceeds_allowlist_stops() -> None:
    result = audit(load_spec(EXAMPLES / "audit-part5.yaml"))
    by_name = {v.gate.name: v for v in result.verdicts}
    assert len(by_name) == 9
    for name in (
        "summarize_freshness_strict",
        "draft_reply_capability",
        "send_email_fresh_verified",
        "archive_all_axes_floor",
        "publish_discounted_thresholds",
    ):
        assert by_name[name].failure is Failure.NONE
        assert by_name[name].severity is Severity.OK
    assert by_name["summarize_no_unverified_taint"].failure is Failure.FALSE_PROCEED
    assert by_name["summarize_no_unverified_taint"].severity is Severity.DANGEROUS
    assert by_name["payment_no_untrusted_taint"].severity is Severity.CRITICAL
    for name in ("audit_requires_clean_window", "send_wire_clean_window"):
        verdict = by_name[name]
        assert verdict.failure is Failure.FALSE_STOP
        assert verdict.severity is Severity.EXPENSIVE
        assert {s.read for s in verdict.starved_by} == {Read.TAINT_IDS, Read.HOP_WINDOW}
    assert (result.n_starved, result.n_critical, result.exit_code()) == (4, 1, 1)


def test_dangerous_example_has_two_critical_irreversible_gates() -> None:
    result = audit(load_spec(EXAMPLES / "audit-dangerous.yaml"))
    critical = sorted(v.gate.name for v in result.verdicts if v.severity is Severity.CRITICAL)
    assert critical == ["delete_customer_record", "issue_refund"]
    escalate = next(v for v in result.verdicts if v.gate.name == "escalate_clean_window")
    assert {s.read for s in escalate.starved_by} == {
        Read.TAINT_IDS,
        Read.HOP_WINDOW,
        Read.ORDERING,
    }
    assert result.exit_code() == 1


def test_healthy_example_starves_no_gate_and_exits_zero_even_strict() -> None:
    result = audit(load_spec(EXAMPLES / "audit-healthy.yaml"))
    assert result.n_starved == 0
    assert all(v.severity is Severity.OK for v in result.verdicts)
    assert result.exit_code(strict=True) == 0


@pytest.mark.parametrize(
    ("flag", "reads"),
    [
        ("score_aggregates", "[scores]"),
        ("taint_ids", "[taint_ids]"),
        ("ordering_preserved", "[ordering]"),
    ],
)
def test_dropping_a_field_starves_exactly_the_gates_reading_it(
    tmp_path: Path, flag: str, reads: str
) -> None:
    compaction = _HEALTHY_COMPACTION.replace(f"{flag}: true", f"{flag}: false")
    starved = audit(load_spec(_one_gate(tmp_path, compaction=compaction, reads=reads)))
    assert starved.verdicts[0].starved
    other = "[hop_window]" if reads != "[scores]" else "[taint_ids]"
    window = "3" if other == "[hop_window]" else None
    fed = audit(load_spec(_one_gate(tmp_path, compaction=compaction, reads=other, window=window)))
    assert not fed.verdicts[0].starved


@pytest.mark.parametrize(("window", "starved"), [("8", False), ("9", True), ("1", False)])
def test_hop_window_starves_only_beyond_the_lineage_window(
    tmp_path: Path, window: str, starved: bool
) -> None:
    result = audit(load_spec(_one_gate(tmp_path, reads="[hop_window]", window=window)))
    assert result.verdicts[0].starved is starved


def test_untruncated_lineage_never_starves_a_window(tmp_path: Path) -> None:
    compaction = _HEALTHY_COMPACTION.replace("lineage_window: 8", "lineage_window: null")
    result = audit(
        load_spec(_one_gate(tmp_path, compaction=compaction, reads="[hop_window]", window="500"))
    )
    assert not result.verdicts[0].starved


@pytest.mark.parametrize(
    ("polarity", "irreversible", "failure", "severity"),
    [
        ("allow", "true", Failure.FALSE_PROCEED, Severity.CRITICAL),
        ("allow", "false", Failure.FALSE_PROCEED, Severity.DANGEROUS),
        ("deny", "true", Failure.FALSE_STOP, Severity.EXPENSIVE),
        ("deny", "false", Failure.FALSE_STOP, Severity.EXPENSIVE),
    ],
)
def test_polarity_decides_failure_direction_and_irreversible_allow_is_critical(
    tmp_path: Path, polarity: str, irreversible: str, failure: Failure, severity: Severity
) -> None:
    compaction = _HEALTHY_COMPACTION.replace("taint_ids: true", "taint_ids: false")
    spec = _one_gate(tmp_path, compaction=compaction, polarity=polarity, irreversible=irreversible)
    verdict = audit(load_spec(spec)).verdicts[0]
    assert (verdict.failure, verdict.severity) == (failure, severity)


def test_non_critical_starvation_exits_zero_unless_strict(tmp_path: Path) -> None:
    compaction = _HEALTHY_COMPACTION.replace("taint_ids: true", "taint_ids: false")
    result = audit(load_spec(_one_gate(tmp_path, compaction=compaction, polarity="deny")))
    assert (result.exit_code(), result.exit_code(strict=True)) == (0, 1)


def test_renderings_list_every_gate_and_mark_critical() -> None:
    result = audit(load_spec(EXAMPLES / "audit-dangerous.yaml"))
    table = render_table(result)
    markdown = render_markdown(result)
    for verdict in result.verdicts:
        assert verdict.gate.name in table
        assert verdict.gate.name in markdown
    assert (
        "| issue_refund | allow | yes | taint_ids | taint ids folded | false-proceed |" in markdown
    )
    assert "**CRITICAL**" in markdown
    assert "2 CRITICAL" in table


_GATE = "gates:\n  - name: g\n    reads: [scores]\n    polarity: allow\n    irreversible: false\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("compaction: [1\n", "spec.yaml:2: invalid YAML"),
        ("- 1\n- 2\n", "spec.yaml:1: expected an audit spec"),
        ("", "expected an audit spec"),
        (_GATE, "spec.yaml:1: compaction: missing"),
        (_HEALTHY_COMPACTION, "spec.yaml:1: gates: missing"),
        (_HEALTHY_COMPACTION + "gates: []\n", "spec.yaml:6: gates: expected a non-empty list"),
        (
            _HEALTHY_COMPACTION.replace("taint_ids: true", "taint_ids: yes please") + _GATE,
            "spec.yaml:3: compaction.taint_ids: expected true or false, got str 'yes please'",
        ),
        (
            _HEALTHY_COMPACTION.replace("lineage_window: 8", "lineage_window: -1") + _GATE,
            "spec.yaml:4: compaction.lineage_window: expected an integer >= 0 or null",
        ),
        (
            _HEALTHY_COMPACTION + "  extra: 1\n" + _GATE,
            "spec.yaml:6: compaction.extra: unknown key",
        ),
        (
            _HEALTHY_COMPACTION + "  taint_ids: false\n" + _GATE,
            "spec.yaml:6: invalid YAML: duplicate key 'taint_ids' (first on line 3)",
        ),
        (
            _HEALTHY_COMPACTION + _GATE.replace("[scores]", "[scores, lineage]"),
            "spec.yaml:8: gates[0] (g).reads[1]: expected one of {scores, taint_ids, hop_window",
        ),
        (
            _HEALTHY_COMPACTION + _GATE.replace("[scores]", "[hop_window]"),
            "gates[0] (g).window: expected an integer >= 1 (the gate reads hop_window)",
        ),
        (
            _HEALTHY_COMPACTION + _GATE + "    window: 8\n",
            "spec.yaml:11: gates[0] (g).window: only meaningful when reads contains hop_window",
        ),
        (
            _HEALTHY_COMPACTION + _GATE.replace("allow", "alow"),
            "spec.yaml:9: gates[0] (g).polarity: expected 'allow' or 'deny'",
        ),
        (
            _HEALTHY_COMPACTION + _GATE.replace("    irreversible: false\n", ""),
            "spec.yaml:7: gates[0] (g).irreversible: missing",
        ),
        (
            _HEALTHY_COMPACTION + _GATE + _GATE.replace("gates:\n", ""),
            "spec.yaml:11: gates[1].name: duplicate gate name 'g' (also gates[0])",
        ),
        (
            _HEALTHY_COMPACTION + _GATE.replace("name: g", "name: ''"),
            "spec.yaml:7: gates[0].name: expected a non-empty string",
        ),
    ],
)
def test_bad_spec_error_names_line_key_and_expectation(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(AuditSpecError) as info:
        load_spec(path)
    assert expected in str(info.value)
    assert str(path) in str(info.value)


def test_missing_spec_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(AuditSpecError, match=r"nope\.yaml: file not found"):
        load_spec(tmp_path / "nope.yaml")


_KEYS = st.sampled_from(
    [
        "compaction",
        "gates",
        "name",
        "score_aggregates",
        "taint_ids",
        "lineage_window",
        "ordering_preserved",
        "reads",
        "window",
        "polarity",
        "irreversible",
        "bogus",
    ]
)
_ATOMS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 12),
    st.sampled_from(["allow", "deny", "scores", "taint_ids", "hop_window", "ordering", "x"]),
)
_SPECS = st.recursive(
    _ATOMS,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_KEYS, inner, max_size=5)),
    max_leaves=14,
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(document=_SPECS)
def test_arbitrary_yaml_either_loads_or_raises_a_named_spec_error(
    tmp_path: Path, document: object
) -> None:
    import yaml

    path = _write(tmp_path, yaml.safe_dump(document))
    try:
        spec = load_spec(path)
    except AuditSpecError as exc:
        message = str(exc)
    else:
        message = ""
        result = audit(spec)
        assert len(result.verdicts) == len(spec.gates)
        assert result.exit_code() in (0, 1)
    if message:
        assert message.startswith(f"{path}:")
