"""The validation runs through Calculon (calculon-ai/calculon) beside c3kit: same runs, same measurements.

Calculon is not a dependency. This script writes, for every scored run that upstream Calculon's
Megatron-style model can express (dense, no FSDP, no context or expert parallelism, A100 or H100),
an application and an execution JSON, then runs `calculon llm APP EXE SYSTEM OUT` when a Calculon
command is available and prints measured, c3kit and Calculon seconds per step with both errors.

    git clone https://github.com/calculon-ai/calculon && pip install -e calculon
    .venv/bin/python benchmarks/calculon_side_by_side.py --calculon "calculon" \
        --systems calculon/examples        # folder holding a100_80g.json and h100_80g_nvl8.json
    .venv/bin/python benchmarks/calculon_side_by_side.py --export-only --out c3kit-out/calculon

What is approximated on the Calculon side (stated per run in the output's `calculon_notes`):
grouped-query attention becomes multi-head attention (Calculon's attention_type has no GQA),
gated MLPs keep their FFN width, FP8 runs use Calculon's float8 datatype, "selective"
recomputation maps to Calculon's "attn_only". Neither tool is fitted to these runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

SYSTEMS = {"A100-SXM-80G": "a100_80g.json", "H100-SXM": "h100_80g_nvl8.json"}
RECOMPUTE = {"none": "none", "selective": "attn_only", "full": "full"}
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp8": "float8"}


def expressible(row) -> str:
    """'' when upstream Calculon can describe the run, else why not."""
    if row["gpu"] not in SYSTEMS:
        return f"no Calculon system file for {row['gpu']}"
    for col, why in (("fsdp", "FSDP"), ("n_experts", "MoE")):
        if int(row[col]) > (1 if col == "n_experts" else 0):
            return why
    if int(row["cp"]) > 1:
        return "context parallelism"
    return ""


def to_calculon(row) -> tuple[dict, dict, list[str]]:
    """(application, execution, notes) of one validation run in Calculon's JSON formats."""
    h, heads = int(row["hidden"]), int(row["heads"])
    head_dim = int(row["head_dim"]) or h // heads
    ffn = int(row["ffn_hidden"]) or 4 * h
    notes = []
    if int(row["kv_heads"]) not in (0, heads):
        notes.append("GQA priced as multi-head attention")
    if int(row["gated_mlp"]):
        notes.append("gated MLP priced as a two-matrix MLP of the same width")
    app = {"hidden": h, "feedforward": ffn, "seq_size": int(row["seq"]), "attn_heads": heads,
           "attn_size": head_dim, "num_blocks": int(row["layers"])}
    multi_node = int(row["gpus"]) > 8
    exe = {"num_procs": int(row["gpus"]), "tensor_par": int(row["tp"]), "pipeline_par": int(row["pp"]),
           "data_par": int(row["dp"]), "tensor_par_net": 0, "pipeline_par_net": 1 if multi_node else 0,
           "data_par_net": 1 if multi_node else 0, "batch_size": int(row["global_batch"]),
           "microbatch_size": int(row["micro_batch"]), "datatype": DTYPES[str(row["dtype"])],
           "fused_activation": True, "attention_type": "multihead",
           "activation_recompute": RECOMPUTE[str(row["recompute"])], "pipeline_interleaving": int(row["vpp"]),
           "optimizer_sharding": int(row["zero"]) >= 1, "tensor_par_comm_type": "rs_ag" if int(row["sp"]) else "ar",
           "tensor_par_overlap": "none", "seq_par_ag_redo": False, "data_par_overlap": bool(int(row["dp_overlap"])),
           "weight_offload": False, "activations_offload": False, "optimizer_offload": False, "training": True}
    return app, exe, notes


def run_calculon(cmd: str, app: Path, exe: Path, system: Path, out: Path) -> float:
    """Seconds per step from `calculon llm` (its stats JSON's total time), NaN when it fails."""
    try:
        subprocess.run([*cmd.split(), "llm", str(app), str(exe), str(system), str(out)], check=True,
                       capture_output=True, timeout=300)
        stats = json.loads(out.read_text())
    except (OSError, subprocess.SubprocessError, ValueError):
        return float("nan")
    key = next((k for k in stats if k.lower().replace(" ", "_") == "total_time"), None)
    return float(stats[key]) if key else float("nan")


def main() -> int:
    """Export (and, with Calculon available, price) every expressible run; print the side-by-side table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calculon", default="calculon", help="the Calculon command (default: calculon on PATH)")
    ap.add_argument("--systems", default=None, help="folder with Calculon's system JSONs (a100_80g.json, ...)")
    ap.add_argument("--out", default="c3kit-out/calculon", help="where the JSONs and results.csv go")
    ap.add_argument("--export-only", action="store_true", help="write the JSONs, do not run Calculon")
    args = ap.parse_args()

    import pandas as pd

    from c3kit.studies.validation import load_runs, validate

    runs = load_runs()
    res = validate(runs=runs).table.set_index("run")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    have = not args.export_only and shutil.which(args.calculon.split()[0]) is not None and args.systems
    if not args.export_only and not have:
        print("Calculon not run (give --calculon and --systems, see the docstring); writing the JSONs only",
              file=sys.stderr)
    rows = []
    for _, row in runs.iterrows():
        r = res.loc[row["run"]]
        why = expressible(row)
        if r["status"] != "scored" or why:
            continue
        app, exe, notes = to_calculon(row)
        a, e = out / f"{row['run']}.app.json", out / f"{row['run']}.exe.json"
        a.write_text(json.dumps(app, indent=2))
        e.write_text(json.dumps(exe, indent=2))
        calc = (run_calculon(args.calculon, a, e, Path(args.systems) / SYSTEMS[row["gpu"]],
                             out / f"{row['run']}.stats.json") if have else float("nan"))
        rows.append({"run": row["run"], "measured_s": r["measured_s"], "c3kit_s": r["predicted_s"],
                     "c3kit_error": r["error"], "calculon_s": calc, "calculon_error": calc / r["measured_s"] - 1,
                     "calculon_notes": "; ".join(notes)})
    df = pd.DataFrame(rows)
    df.to_csv(out / "results.csv", index=False)
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        print(df.drop(columns="calculon_notes").to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    for name in ("c3kit", "calculon"):
        e = df[f"{name}_error"].dropna()
        if len(e):
            print(f"{name}: {len(e)} runs, MAE {100 * e.abs().mean():.1f}%, bias {100 * e.mean():+.1f}%")
    print(f"files: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
