"""`c3kit hw` through the CLI entry point: tables, JSON, projections, bad names -> exit 2."""

import json

from c3kit.cli.main import main


def test_list_json(capsys):
    assert main(["hw", "list", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    names = {g["name"] for g in doc["gpus"]}
    assert {"H200-SXM", "MI300X", "T3-SIM", "B200"} <= names


def test_list_table(capsys):
    assert main(["hw", "list"]) == 0
    assert "MI355X" in capsys.readouterr().out


def test_show_json_with_sources(capsys):
    assert main(["hw", "show", "h200", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["name"] == "H200-SXM" and doc["flops"]["bf16"] == 989.4e12 and "hbm_bw" in doc["sources"]


def test_show_projected(capsys):
    assert main(["hw", "show", "H200-SXM", "--project", "historical", "--generations", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["name"] == "H200-SXM+2g(historical)" and doc["flops"]["bf16"] > 989.4e12 * 7


def test_show_table(capsys):
    assert main(["hw", "show", "MI300X"]) == 0
    assert "DMA" in capsys.readouterr().out


def test_rules_json(capsys):
    assert main(["hw", "rules", "--json"]) == 0
    assert "comm-rich" in {r["name"] for r in json.loads(capsys.readouterr().out)["rules"]}


def test_unknown_gpu_exit_2_with_suggestion(capsys):
    assert main(["hw", "show", "H200-SMX"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and "H200-SXM" in err and "Traceback" not in err


def test_unknown_rule_exit_2(capsys):
    assert main(["hw", "show", "H200", "--project", "nope"]) == 2
    assert "historical" in capsys.readouterr().err


def test_negative_generations_exit_2(capsys):
    assert main(["hw", "show", "H200", "--project", "balanced", "--generations", "-1"]) == 2
