"""Studies: one module per paper, each returning tidy tables and figures (see docs/studies.md)."""
