"""--help shows every default (none eaten by the markup) and analyze's auto-layout rules."""

import re

import pytest

from c3kit.cli.main import main


def _help(capsys, monkeypatch, *cmd) -> str:
    monkeypatch.setenv("COLUMNS", "400")  # one line per option: no wrapping inside a default
    monkeypatch.setenv("TERMINAL_WIDTH", "400")
    assert main([*cmd, "--help"]) == 0
    text = capsys.readouterr().out
    return re.sub(r"[ \t]+", " ", text.replace("│", " "))


def _option_lines(text: str) -> dict[str, str]:
    return {m.group(1): line for line in text.splitlines() if (m := re.match(r"\s*(--[a-z-]+)", line))}


@pytest.mark.parametrize("cmd", [["analyze"], ["scale"], ["bench", "comm"], ["bench", "overlap"]])
def test_every_option_shows_a_default(capsys, monkeypatch, cmd):
    text = _help(capsys, monkeypatch, *cmd)
    assert not re.search(r"\w \.", text), "a default was eaten by the markup (text ' .')"
    for opt, line in _option_lines(text).items():
        if opt in ("--help", "--json", "--fsdp", "--script", "--backend", "--backends", "--comms") or "<bool>" in line:
            continue
        assert "[default:" in line, line


def test_analyze_help_states_defaults_and_auto_layout(capsys, monkeypatch):
    text = _help(capsys, monkeypatch, "analyze")
    opts = _option_lines(text)
    assert "[default: (one node" in opts["--gpus"]
    assert "[default: (the largest of 8, 4, 2, 1" in opts["--tp"]
    assert "[default: (the fewest that fit)]" in opts["--pp"]
    assert "[default: Llama-3-70B]" in opts["--model"] and "[default: 8192]" in opts["--seq"]
    flat = " ".join(text.split())
    assert "Auto layout" in flat and "ZeRO-1" in flat and "c3kit.analyze" in flat


def test_scale_help_defaults_are_the_grid_spec(capsys, monkeypatch):
    from c3kit.studies.scaling import GridSpec

    opts = _option_lines(_help(capsys, monkeypatch, "scale"))
    g = GridSpec()
    for name in ("hidden", "layers", "seq", "batch", "generations", "tp", "pp", "dp", "rules"):
        shown = ",".join(str(v) for v in getattr(g, name))
        assert f"[default: ({shown})]" in opts[f"--{name}"], name
    assert f"[default: ({g.base_gpu})]" in opts["--hw"]
