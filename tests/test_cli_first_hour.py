"""The ``provnet`` front as a new user meets it: version, usage, one form per setting (issue 29)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import build_parser, main
from nodes.config import ENV_VARS, ConfigError, NodeConfig
from nodes.home import check_node_name


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"provnet {version('provnet')}\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["experiment", "run", "--bogus"],
        ["experiment", "boundary", "--chian"],
        ["cluster", "up", "--bogus"],
        ["node", "health", "--bogus"],
    ],
)
def test_a_flag_typo_prints_the_subcommands_usage(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    err = capsys.readouterr().err
    command = " ".join(a for a in argv if not a.startswith("-"))
    assert err.startswith(f"usage: provnet {command} ")
    assert f"provnet {command}: error: unrecognized arguments: {argv[-1]}" in err


@pytest.mark.parametrize(
    ("env", "key"),
    [
        ({"PROVNET_NAME": "a"}, "data_dir"),
        ({"PROVNET_DATA_DIR": "d"}, "name"),
        ({"PROVNET_NAME": "A B", "PROVNET_DATA_DIR": "d"}, "name"),
        ({"PROVNET_LISTEN": "nohost"}, "listen"),
        ({"PROVNET_FAULT": "melt"}, "fault"),
        ({"PROVNET_FAULT": "slow"}, "fault"),
        ({"PROVNET_MAX_MESSAGE_BYTES": "10"}, "max_message_bytes"),
        ({"PROVNET_MIN_WITNESSES": "0"}, "min_witnesses"),
        ({"PROVNET_REAP_INTERVAL_S": "-1"}, "reap_interval_s"),
        ({"PROVNET_LOG_LEVEL": "loud"}, "log_level"),
        ({"PROVNET_MAX_CONCURRENT_RPCS": "0"}, "max_concurrent_rpcs"),
        ({"PROVNET_OPERATOR_KEYS": "zz"}, "operator_keys"),
    ],
)
def test_node_errors_name_a_setting_one_way(env: dict[str, str], key: str) -> None:
    full = {"PROVNET_NAME": "a", "PROVNET_DATA_DIR": "d", **env}
    if key in ("name", "data_dir") and len(env) == 1:
        full = dict(env)
    with pytest.raises(ConfigError) as caught:
        NodeConfig.from_env_and_args(None, full)
    flag = "--" + key.replace("_", "-")
    assert str(caught.value).startswith(f"{flag} (${ENV_VARS[key]})")
    # no other spelling of any setting: field names, bare variables, "(or $…)"
    assert "(or $" not in str(caught.value)
    assert f"{key} " not in str(caught.value).replace(flag, "")


def test_one_node_name_rule_for_node_and_cluster(tmp_path: Path) -> None:
    for name in ("a_b", "1a", "node-2"):
        assert check_node_name(name) == name
        assert NodeConfig(name=name, data_dir=tmp_path).name == name
    for name in ("A", "_a", "a.b", "x" * 33):
        with pytest.raises(ValueError, match="lower-case letters, digits, '_' and '-'") as one:
            check_node_name(name)
        with pytest.raises(ConfigError, match="lower-case letters, digits, '_' and '-'") as two:
            NodeConfig(name=name, data_dir=tmp_path)
        rule = str(one.value).rsplit("expected ", 1)[1]
        assert f"expected {rule}, got {name!r}" in str(two.value)


def test_every_node_flag_has_words_for_help() -> None:
    import argparse

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    node = sub.choices["node"]
    for action in node._actions:
        if action.dest in ENV_VARS:
            assert action.help is not None
            # not the bare field name (as --reap-interval-s had: "reap_interval_s")
            assert action.help.split(" ($")[0] != action.dest, action.help


def test_boundary_transport_remote_without_nodes_says_what_it_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["experiment", "boundary", "--transport", "remote", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2
    assert "(got remote)" not in err
    assert "give them with --cluster or --nodes" in err


def test_report_sweep_out_none_fails_first_without_the_note(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["experiment", "report", "--out", str(tmp_path / "no"), "--sweep-out", "none"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("provnet: error:")
    assert "crossover section skipped" not in err
