"""The CLI entry: errors become one line and exit code 2."""

from c3kit.cli.main import main


def test_version(capsys):
    assert main(["version"]) == 0
    assert capsys.readouterr().out.strip() == "0.1.0"


def test_version_json(capsys):
    import json

    assert main(["version", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"version": "0.1.0"}


def test_unknown_command_exits_2(capsys):
    assert main(["no-such-command"]) == 2


def test_c3kit_error_is_one_line(capsys, monkeypatch):
    from c3kit.cli import main as m
    from c3kit.errors import C3kitError

    def boom():
        raise C3kitError("bad thing: fix it")

    m.app.command("boom-test")(boom)
    try:
        assert main(["boom-test"]) == 2
        err = capsys.readouterr().err
        assert err == "error: bad thing: fix it\n"
    finally:
        m.app.registered_commands.pop()
