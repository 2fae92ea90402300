"""The `c3kit` command: sub-commands are registered from one module each."""

from __future__ import annotations

import sys

import typer

from c3kit.cli.common import JSON_OPT, emit_json
from c3kit.errors import C3kitError

app = typer.Typer(
    name="c3kit",
    help="Computation, communication and memory performance of distributed ML on GPUs.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Computation, communication and memory performance of distributed ML on GPUs."""


@app.command()
def version(as_json: bool = JSON_OPT) -> None:
    """Print the c3kit version."""
    from c3kit import __version__

    if as_json:
        emit_json({"version": __version__})
    else:
        print(__version__)


def _register() -> None:
    import importlib

    for module in ("analyze", "hw", "scale", "validate", "overlap", "study", "bench", "pim", "serve"):
        mod = importlib.import_module(f"c3kit.cli.{module}_cmd")
        mod.register(app)


_register()


def main(argv: list[str] | None = None) -> int:
    """Run the app and return its exit code; any C3kitError becomes one stderr line and exit code 2."""
    try:
        app(args=argv, prog_name="c3kit")
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except C3kitError as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    return 0


def run() -> None:
    """Console-script entry point."""
    raise SystemExit(main())


if __name__ == "__main__":
    run()
