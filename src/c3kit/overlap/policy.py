"""The fitted policy trees of c3kit.overlap.heuristic (placeholder until fitted)."""

TREES: dict = {}
