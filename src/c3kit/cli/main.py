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


def _click_exceptions():
    try:
        from typer._click import exceptions as x  # typer >= 0.20 ships its own click
    except ImportError:  # pragma: no cover - older typer on click
        from click import exceptions as x
    return x


def _error(message: str) -> int:
    sys.stderr.write("error: " + " ".join(str(message).split()) + "\n")
    return 2


def main(argv: list[str] | None = None) -> int:
    """Run the app and return its exit code; any bad input becomes one `error:` line on stderr and exit code 2."""
    x = _click_exceptions()
    try:
        rc = app(args=argv, prog_name="c3kit", standalone_mode=False)
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except C3kitError as e:
        return _error(str(e))
    except x.NoArgsIsHelpError as e:
        e.show()
        return e.exit_code
    except x.UsageError as e:
        ctx = e.ctx
        hint = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
        return _error(e.format_message() + hint)
    except x.ClickException as e:
        return _error(e.format_message())
    except typer.Abort:
        sys.stderr.write("aborted\n")
        return 130
    except UnicodeDecodeError as e:  # a file that is not text, read below a layer that did not check
        return _error(f"an input file is not UTF-8 text ({e.reason} at byte {e.start}): give a text file")
    return rc if isinstance(rc, int) else 0


def run() -> None:
    """Console-script entry point."""
    raise SystemExit(main())


if __name__ == "__main__":
    run()
