"""Validation: projected training-step times against published measured step times of real runs.

The runs (studies/data/validation_runs.csv, one row each with its source) are Megatron-LM GPT
training on Selene (DGX A100 80GB, NVSwitch, 8 x 200 Gb/s HDR InfiniBand per node):
- Korthikanti et al. 2022, Tables 3 and 5: 22B / 175B / 530B / 1T, TP 8, PP up to 64, iteration
  times with sequence parallelism + selective recomputation ("present work") and with full
  recomputation; and the 530B run scaled to 8-way data parallelism (2240 GPUs, Sec. 6.3).
- NVIDIA 2024, Nemotron-4 340B technical report: 6144 H100, TP 8, PP 12 interleaved, DP 64, 8.0 s
  per batch of 2304 sequences (an H100 run, projected without calibration).
- Narayanan et al. 2021, Tables 1 and 2: TFLOP/s per GPU of PTD-P runs up to 3072 GPUs, turned into
  step times with the paper's own FLOP count (its eq. 3, which counts the recomputed forward):
  F = 96 B s l h^2 (1 + s / 6h + V / 16lh), step = F / (X n).

Every run is projected with the same model and no per-run factor: c3kit.workload.build_step (the
run's exact layout, interleaving included), c3kit.cost in its efficiency mode (GEMM efficiency
curve, memory and attention efficiencies, collectives with the fastest valid algorithm; DP and PP
groups cross nodes on the NICs, placed as Megatron places ranks), c3kit.step's overlap model.
Where a paper states that something is not overlapped (gradient all-reduce of the 530B DP run),
the hidden part of that communication is added back.

Calibrated parameter (one, global, fitted on these runs, no per-run factor): the fraction of the
datasheet bf16 peak that large GEMMs reach on the A100, GEMM_PEAK_FRACTION = 0.70 (218 of 312
TFLOP/s), in place of the efficiency curve's default 0.80 (a Hopper cuBLAS figure). Everything
else is the cost layer's "efficiency" defaults. `validate("efficiency")` gives the uncalibrated
numbers for comparison.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources

import numpy as np
import pandas as pd

from c3kit.errors import StudyError

GEMM_PEAK_FRACTION = {"A100-SXM-80G": 0.70}  # calibrated: see the module docstring and docs/scaling.md

COLUMNS = ("run", "source", "table", "gpu", "hidden", "layers", "heads", "vocab", "kv_heads", "ffn_hidden",
           "tied_embeddings", "bias", "dropout", "seq", "gpus", "tp", "pp", "vpp",
           "dp", "micro_batch", "global_batch", "sp", "recompute", "dp_overlap", "measured_s", "measured_what",
           "measured_value", "notes")


@dataclass
class ValidationResult:
    """Per-run measured, predicted and error, with the mean absolute error."""

    table: pd.DataFrame
    mae: float
    cost_model: str
    notes: list[str] = field(default_factory=list)

    def by_source(self) -> pd.DataFrame:
        """Mean absolute error per paper."""
        t = self.table.assign(abs_error=self.table["error"].abs())
        return t.groupby("paper", sort=False).agg(runs=("run", "size"), mae=("abs_error", "mean")).reset_index()


def load_runs(path=None) -> pd.DataFrame:
    """The shipped validation runs (or a CSV with the same columns), with measured step times filled in."""
    try:
        if path is None:
            text = resources.files("c3kit.studies").joinpath("data", "validation_runs.csv").open("r")
            df = pd.read_csv(text)
        else:
            df = pd.read_csv(path)
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as e:
        raise StudyError(f"cannot read validation runs {path or 'validation_runs.csv'}: {e}") from None
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise StudyError(f"validation runs lack column(s) {', '.join(missing)}")
    df = df.copy()
    tf = df["measured_what"] == "tflops_per_gpu"
    df.loc[tf, "measured_s"] = narayanan_step_time(df[tf])
    bad = df["measured_s"].isna() | ~(df["measured_s"] > 0)
    if bad.any():
        raise StudyError(f"validation runs without a positive measured time: {', '.join(df.loc[bad, 'run'])}")
    return df


def narayanan_step_time(df: pd.DataFrame) -> np.ndarray:
    """Step seconds from Narayanan et al.'s TFLOP/s per GPU and their eq. (3) FLOP count."""
    B, s, l, h, V = (df[c].to_numpy(dtype=float) for c in ("global_batch", "seq", "layers", "hidden", "vocab"))
    flops = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
    return flops / (df["measured_value"].to_numpy(dtype=float) * 1e12 * df["gpus"].to_numpy(dtype=float))


def run_objects(row):
    """(ModelConfig, Parallelism) of one validation run (kv_heads / ffn_hidden 0: MHA / 4h, as ModelConfig)."""
    from c3kit.workload.model import ModelConfig
    from c3kit.workload.parallel import Parallelism

    extra = {"dropout": bool(row["dropout"])} if "dropout" in ModelConfig.__dataclass_fields__ else {}
    m = ModelConfig(name=str(row["run"]), hidden=int(row["hidden"]), layers=int(row["layers"]),
                    heads=int(row["heads"]), kv_heads=int(row["kv_heads"]), ffn_hidden=int(row["ffn_hidden"]),
                    vocab=int(row["vocab"]), max_seq=int(row["seq"]), bias=bool(row["bias"]),
                    tied_embeddings=bool(row["tied_embeddings"]), **extra)
    p = Parallelism(tp=int(row["tp"]), sp=bool(row["sp"]), dp=int(row["dp"]), pp=int(row["pp"]),
                    vpp=int(row["vpp"]), micro_batch=int(row["micro_batch"]), global_batch=int(row["global_batch"]),
                    recompute=str(row["recompute"]))
    if p.gpus != int(row["gpus"]):
        raise StudyError(f"run {row['run']}: tp x pp x dp = {p.gpus} != {row['gpus']} GPUs")
    return m, p


def megatron_timer(cost_model, tp: int):
    """c3kit.cost timer with Megatron-LM's pipeline scatter/gather (Narayanan et al. 2021, Sec. 4.1).

    Each of the tp ranks sends 1/tp of the activation to the next stage over its own NIC and the
    receiving stage all-gathers the pieces over NVLink, instead of tp copies of the whole tensor.
    """
    from dataclasses import replace

    from c3kit.step.project import step_timer
    from c3kit.workload.ops import Collective

    base = step_timer(cost_model)

    def timer(op, hw):
        if isinstance(op, Collective) and op.group == "pp" and tp > 1 and op.span == "inter":
            piece = base(replace(op, bytes=op.bytes / tp), hw)
            gather = base(Collective(op.name + ".sg", "all_gather", op.bytes, tp, "tp", "intra"), hw)
            return piece + gather
        return base(op, hw)

    return timer


def calibrated_model(gpu_name: str):
    """The validation cost model: "efficiency" with the calibrated GEMM peak fraction of this GPU (if any)."""
    from c3kit.cost.model import CostModel, curve_of
    from c3kit.hw import get_gpu

    base = CostModel(kind="efficiency")
    frac = GEMM_PEAK_FRACTION.get(get_gpu(gpu_name).name)
    if frac is None:
        return base
    curve = curve_of(base, get_gpu(gpu_name))
    return base.with_(curve=curve.with_(peak_frac={**dict(curve.peak_frac), "bf16": frac, "fp16": frac}))


def predict(row, cost_model="calibrated", policy=None) -> dict:
    """Projected step of one run: step time and its parts (seconds per GPU)."""
    from c3kit.hw import get_gpu
    from c3kit.step import project
    from c3kit.workload.graph import build_step

    m, p = run_objects(row)
    gpu = get_gpu(str(row["gpu"]))
    if isinstance(cost_model, str) and cost_model == "calibrated":
        cost_model = calibrated_model(gpu.name)
    g = build_step(m, p, "train", int(row["seq"]), "bf16", gpu.gpus_per_node)
    sp_already = p.sp  # with sequence parallelism the graph already sends 1/tp of the activation
    timer = None if sp_already else megatron_timer(cost_model, p.tp)
    r = project(g, gpu, cost_model=cost_model, policy=policy, timer=timer)
    t = r.totals
    step = t.step_time
    dp_hidden = sum(x.hidden_s for x in r.rows if x.stream == "dp")
    if not bool(row["dp_overlap"]):
        step += dp_hidden
    return {"predicted_s": step, "compute_s": t.compute, "comm_s": t.comm, "exposed_s": t.exposed
            + (0.0 if bool(row["dp_overlap"]) else dp_hidden), "bubble_s": t.bubble, "mfu_predicted": t.mfu
            * t.step_time / step}


def validate(cost_model="calibrated", runs: pd.DataFrame | None = None, policy=None,
             progress=None) -> ValidationResult:
    """Predict every run and compare: error = predicted / measured - 1; MAE = mean |error|.

    progress(done, total), when given, is called after every run.
    """
    runs = load_runs() if runs is None else runs
    rows = []
    for _, row in runs.iterrows():
        pred = predict(row, cost_model, policy)
        rows.append({"run": row["run"], "paper": str(row["source"]).split(",")[0].split(" (")[0],
                     "table": row["table"], "gpus": int(row["gpus"]),
                     "layout": f"tp{row['tp']} pp{row['pp']}{'x' + str(row['vpp']) if row['vpp'] > 1 else ''} "
                               f"dp{row['dp']}{' sp' if row['sp'] else ''} {row['recompute']}",
                     "measured_s": float(row["measured_s"]), **pred})
        if progress is not None:
            progress(len(rows), len(runs))
    t = pd.DataFrame(rows)
    t["error"] = t["predicted_s"] / t["measured_s"] - 1
    mae = float(t["error"].abs().mean())
    what = ("c3kit.cost 'efficiency' with one calibrated parameter (A100 bf16 GEMM peak fraction "
            f"{GEMM_PEAK_FRACTION['A100-SXM-80G']})" if cost_model == "calibrated" else f"c3kit.cost {cost_model!r}")
    notes = [f"Cost model: {what}; overlap: c3kit.step (ops overlap where dependencies allow); Megatron's "
             "pipeline scatter/gather; no per-run factors. Narayanan et al.'s measured step times are derived from their TFLOP/s per GPU with their "
             "eq. (3). Micro-batch size and interleaving of Narayanan et al.'s Table 1 runs are not stated: "
             "micro-batch 1 and no interleaving are assumed (Table 2 states micro-batch 1)."]
    return ValidationResult(table=t, mae=mae, cost_model=cost_model if isinstance(cost_model, str) else "custom",
                            notes=notes)
