"""Command-line interface (typer + rich); the only layer that prints."""
