"""Reduce device call 29's moe_host rows (benchmarks/ops_h200/h200-sxm-ops-moe_host.json) to the shipped
calibration c3kit.step.moe_host reads: the token-count waits and the whole-layer passes (layer_fwd, layer_bwd)
of both expert implementations, with the columns the model uses. Run: python benchmarks/reduce_moe_host.py
(tests/step/test_moe_host.py checks that the shipped file is this reduction of the raw file)."""

from __future__ import annotations

import json
from pathlib import Path

from c3kit.cost.calib_store import op_calibration_path

RAW = Path(__file__).resolve().parent / "ops_h200" / "h200-sxm-ops-moe_host.json"
KEEP_PASSES = ("sync", "layer_fwd", "layer_bwd")
KEEP_COLUMNS = ("experts_impl", "model", "tokens", "experts", "local_experts", "top_k", "ep", "pass", "wall_s",
                "host_s", "gpu_s", "kernels")


def reduce(doc: dict) -> dict:
    """The reduced document: the kept passes' rows with the kept columns, the raw file's meta, the same kind."""
    cols = list(doc["columns"])
    ix = [cols.index(c) for c in KEEP_COLUMNS]
    rows = [[r[i] for i in ix] for r in doc["rows"] if r[cols.index("pass")] in KEEP_PASSES]
    meta = dict(doc["meta"], reduced_from=f"benchmarks/ops_h200/{RAW.name}: passes {', '.join(KEEP_PASSES)}")
    return {"meta": meta, "kind": doc["kind"], "columns": list(KEEP_COLUMNS), "rows": rows}


def main() -> None:
    """Write the shipped reduced calibration of the H200."""
    out = op_calibration_path("H200-SXM", "moe_host")
    doc = reduce(json.loads(RAW.read_text()))
    rows = ",\n  ".join(json.dumps(r) for r in doc["rows"])
    head = json.dumps({k: doc[k] for k in ("meta", "kind", "columns")}, indent=1)[:-2]
    out.write_text(f'{head},\n "rows": [\n  {rows}\n ]\n}}\n')
    print(out)


if __name__ == "__main__":
    main()
