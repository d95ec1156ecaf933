"""NodeConfig: flags over environment over defaults; errors name the setting and value."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from nodes.config import ENV_VARS, ConfigError, LogFormat, NodeConfig, Peer, parse_peers
from nodes.faults import FaultMode


def test_flags_override_environment_which_overrides_defaults(tmp_path: Path) -> None:
    env = {
        "PROVNET_NAME": "envname",
        "PROVNET_DATA_DIR": str(tmp_path),
        "PROVNET_FAULT": "slow",
        "PROVNET_FAULT_DELAY_MS": "250",
        "PROVNET_PEERS": "b=127.0.0.1:7002; c=127.0.0.1:7003," + "ab" * 32,
        "PROVNET_LOG_FORMAT": "json",
    }
    args = argparse.Namespace(name="a", listen="127.0.0.1:7001", fault=None)
    config = NodeConfig.from_env_and_args(args, env)
    assert config.name == "a"
    assert config.listen == "127.0.0.1:7001"
    assert config.fault is FaultMode.SLOW
    assert config.fault_delay_ms == 250
    assert config.log_format is LogFormat.JSON
    assert config.peers == (
        Peer("b", "127.0.0.1:7002"),
        Peer("c", "127.0.0.1:7003", "ab" * 32),
    )
    assert config.peer("c") == "127.0.0.1:7003"
    assert config.max_message_bytes == 4 * 1024 * 1024


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"PROVNET_NAME": "a"}, "PROVNET_DATA_DIR"),
        ({"PROVNET_NAME": "a", "PROVNET_DATA_DIR": "d", "PROVNET_FAULT": "melt"}, "PROVNET_FAULT"),
        (
            {"PROVNET_NAME": "a", "PROVNET_DATA_DIR": "d", "PROVNET_PEERS": "b=nohost"},
            "PROVNET_PEERS",
        ),
        (
            {"PROVNET_NAME": "a", "PROVNET_DATA_DIR": "d", "PROVNET_DEADLINE_MS": "soon"},
            "PROVNET_DEADLINE_MS",
        ),
        ({"PROVNET_NAME": "A B", "PROVNET_DATA_DIR": "d"}, "PROVNET_NAME"),
        (
            {"PROVNET_NAME": "a", "PROVNET_DATA_DIR": "d", "PROVNET_FAULT": "slow"},
            "PROVNET_FAULT_DELAY_MS",
        ),
    ],
)
def test_bad_settings_raise_config_error_naming_the_setting(
    env: dict[str, str], named: str
) -> None:
    with pytest.raises(ConfigError, match=named):
        NodeConfig.from_env_and_args(None, env)


def test_peers_with_duplicate_names_are_rejected() -> None:
    with pytest.raises(ConfigError, match="listed twice"):
        parse_peers("a=127.0.0.1:1 a=127.0.0.1:2")


def test_one_peers_list_of_all_members_configures_each_without_itself() -> None:
    # a StatefulSet's ConfigMap or a stack's shared environment lists every member
    members = "node-0=node-0.provnet:50051;node-1=node-1.provnet:50051;node-2=node-2.provnet:50051"
    for me in ("node-0", "node-1", "node-2"):
        env = {"PROVNET_NAME": me, "PROVNET_DATA_DIR": "/data/node", "PROVNET_PEERS": members}
        config = NodeConfig.from_env_and_args(None, env)
        assert [p.name for p in config.peers] == [
            n for n in ("node-0", "node-1", "node-2") if n != me
        ]
        assert config.peer("node-1" if me != "node-1" else "node-0").endswith(".provnet:50051")


def test_every_setting_has_a_provnet_variable() -> None:
    fields = set(NodeConfig.__dataclass_fields__)
    assert set(ENV_VARS) == fields
    assert all(var == "PROVNET_" + key.upper() for key, var in ENV_VARS.items())
