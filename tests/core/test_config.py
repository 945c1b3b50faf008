"""Configuration files: /etc < $XDG_CONFIG_HOME < PREFLIGHT_* < the command line, each value shown
with its source by `config show`, and bad configuration refused with file:line and exit 2."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from preflight import config
from preflight.cli import main

SIM_SPEC = {"nodes": 2}
SIM_MODE = "loopback"


@pytest.fixture
def layers(tmp_path, monkeypatch):
    system = tmp_path / "etc" / "config.yaml"
    user = tmp_path / "xdg" / "preflight" / "config.yaml"
    system.parent.mkdir(parents=True)
    user.parent.mkdir(parents=True)
    monkeypatch.setattr(config, "SYSTEM_PATH", system)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    for k in config.KEYS:
        monkeypatch.delenv(config.ENV_PREFIX + k.upper(), raising=False)
    return system, user, monkeypatch


def _show():
    r = CliRunner().invoke(main, ["config", "show", "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)


def test_each_layer_overrides_the_one_below_and_says_so(layers):
    system, user, mp = layers
    assert _show()["forks"] == {"value": None, "source": "default"}
    system.write_text("forks: 8\ndeadline: 120\nformat: markdown\n")
    user.write_text("# mine\nforks: 16\n")
    shown = _show()
    assert shown["forks"] == {"value": 16, "source": f"{user}:2"}
    assert shown["deadline"] == {"value": 120.0, "source": f"{system}:2"}
    mp.setenv("PREFLIGHT_FORKS", "4")
    assert _show()["forks"] == {"value": 4, "source": "PREFLIGHT_FORKS"}
    text = CliRunner().invoke(main, ["config", "show"]).output
    assert "PREFLIGHT_FORKS" in text and f"{system}:3" in text and "30 (built-in)" in text


def test_config_reaches_the_commands_and_the_command_line_wins(layers, sim_cluster):
    system, user, mp = layers
    user.write_text(f"inventory: {sim_cluster.inventory_path}\nformat: json\n")
    r = CliRunner().invoke(main, ["run", "--checks", "npu.health", "-q"])   # no INVENTORY, no --format
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["inventory"]["path"] == str(sim_cluster.inventory_path)
    mp.setenv("PREFLIGHT_FORMAT", "jsonl")
    r = CliRunner().invoke(main, ["run", "--checks", "npu.health", "-q"])
    assert all(json.loads(line)["schema"] == "preflight.result/1" for line in r.output.splitlines())
    r = CliRunner().invoke(main, ["run", "--checks", "npu.health", "-q", "--format", "markdown"])
    assert r.output.startswith("# preflight")


def test_history_path_from_config_is_where_ack_writes(layers):
    system, user, mp = layers
    db = user.parent / "h.sqlite"
    user.write_text(f"history: {db}\n")
    r = CliRunner().invoke(main, ["ack", "node01", "hccn.link", "--until", "2999-01-01", "--reason", "known"])
    assert r.exit_code == 0, r.output
    assert db.exists()
    assert "node01" in CliRunner().invoke(main, ["ack", "--list"]).output


@pytest.mark.parametrize("text, message", [
    ("forks: 16\nforsk: 3\n", ":2: unknown setting 'forsk' (did you mean 'forks'?)"),
    ("forks: 0\n", ":1: forks: expected 1-1024, got 0"),
    ("forks: [1\n", ":2:1: "),
    ("format: jsno\n", ":1: format: expected one of table"),
    ("deadline: -1\n", ":1: deadline: expected seconds above 0"),
    ("- forks\n", ":1: expected a mapping of settings"),
    ("format: no\n", "YAML 1.1 reads 'no' as a boolean"),
])
def test_bad_config_is_one_line_with_file_and_line_and_exit_2(layers, text, message):
    system, user, mp = layers
    user.write_text(text)
    for argv in (["config", "show"], ["run", "x.yaml"], ["history"]):
        r = CliRunner().invoke(main, argv)
        assert r.exit_code == 2, (argv, r.output)
        assert f"preflight: {user}" in r.output and message in r.output and "Traceback" not in r.output, r.output
        assert len(r.output.strip().splitlines()) == 1


def test_bad_environment_value_names_the_variable(layers):
    system, user, mp = layers
    mp.setenv("PREFLIGHT_GATE_DEADLINE", "soon")
    r = CliRunner().invoke(main, ["config", "show"])
    assert r.exit_code == 2 and "PREFLIGHT_GATE_DEADLINE='soon': expected seconds" in r.output
