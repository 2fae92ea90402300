"""CLI: `c3kit bench` (being built; see the issue for this layer)."""

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to the c3kit app."""
