"""Every leaf command of the CLI takes --json (the issue's contract for all commands)."""

import typer

from c3kit.cli.main import app


def _leaves(cmd, path=()):
    subs = getattr(cmd, "commands", None)
    if subs:
        for name, sub in subs.items():
            yield from _leaves(sub, (*path, name))
    else:
        yield path, cmd


def test_every_command_takes_json():
    leaves = list(_leaves(typer.main.get_command(app)))
    assert len(leaves) >= 20  # analyze, scale, validate, hw, overlap, study, bench, pim groups
    missing = [" ".join(p) for p, c in leaves if "--json" not in [o for prm in c.params for o in getattr(prm, "opts", [])]]
    assert missing == []
