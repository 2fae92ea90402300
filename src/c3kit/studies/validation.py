"""Validation: projected training-step times scored against published, measured training runs.

The runs (studies/data/validation_runs.csv, described in studies/data/README.md) come from papers,
framework benchmark tables and vendor performance pages: Megatron-LM, Megatron-DeepSpeed, NeMo and
Megatron-Bridge (Megatron-Core), MosaicML llm-foundry (PyTorch FSDP) and torchtitan (FSDP2), on
A100, H100 and B200, dense and MoE, BF16 and FP8. Each row carries its source, its layout, what it
had to assume, and the formula that turned the published figure into seconds per step.

Scoring only, never fitting: every run is priced by exactly the model `c3kit analyze` uses (the same
CostModel, power mode and overlap policy, `c3kit.step.project` on `c3kit.workload.build_step`),
with no parameter derived from these rows and no per-run factor. A run whose layout needs a feature
the model lacks (context parallelism, layers that do not divide into the pipeline stages, ...) is
listed as "not modelled: <feature>" and left out of the score, never silently dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from importlib import resources
from typing import Callable

import numpy as np
import pandas as pd

from c3kit.errors import C3kitError, StudyError

COLUMNS = ("run", "source", "url", "table", "framework", "framework_version", "gpu", "hidden", "layers", "heads",
           "kv_heads", "head_dim", "ffn_hidden", "vocab", "gated_mlp", "norm", "position", "tied_embeddings", "bias",
           "dropout", "n_experts", "top_k", "moe_ffn_hidden", "seq", "gpus", "tp", "sp", "pp", "vpp", "cp", "dp",
           "ep", "fsdp", "zero", "micro_batch", "global_batch", "recompute", "dtype", "dp_overlap", "measured_what",
           "measured_value", "formula", "assumed", "notes")
MEASURES = ("iteration_s", "tokens_per_s_total", "tokens_per_s_per_gpu", "tflops_per_gpu_narayanan",
            "tflops_per_gpu_palm")
GROUPS = ("gpu", "op_basis", "framework_family", "dtype", "kind", "source_short")
# op classes whose basis labels a run (cost/basis.py): the ones every training step prices
BASIS_CLASSES = ("gemm", "attention", "memory", "floor", "gemm_grouped", "gemm_fp8", "fp8_cast")
TARGETS = {"mae": 0.08, "worst": 0.20, "bias": 0.03}  # issue 13's targets, shown beside the figures
OVERHEAD_PREFIX = "overhead."  # per-run columns of each named step-level overhead (step/overheads.py)
BREAKDOWN = ("compute_s", "exposed_s", "bubble_s")  # with the named overheads: the predicted step, summed


@dataclass
class ValidationResult:
    """Per-run measured, predicted and signed error (scored and not-modelled runs), with summaries."""

    table: pd.DataFrame  # every run; status "scored" or "not modelled: ..."
    cost_model: str
    notes: list[str] = field(default_factory=list)

    @property
    def scored(self) -> pd.DataFrame:
        """The runs that entered the score."""
        return self.table[self.table["status"] == "scored"]

    @property
    def skipped(self) -> pd.DataFrame:
        """The runs left out, each with the feature the model lacks."""
        return self.table[self.table["status"] != "scored"]

    @property
    def mae(self) -> float:
        """Mean absolute error over the scored runs."""
        return float(self.scored["error"].abs().mean())

    def overall(self) -> dict:
        """runs, MAE, median |error|, worst (signed) and bias (mean signed error) over the scored runs."""
        return error_stats(self.scored["error"])

    def by_group(self) -> pd.DataFrame:
        """The same statistics per GPU, framework family, dtype, dense/MoE and source."""
        out = []
        for g in GROUPS:
            for key, part in self.scored.groupby(g, sort=True):
                out.append({"group": g, "value": key, **error_stats(part["error"])})
        return pd.DataFrame(out, columns=["group", "value", "runs", "mae", "median", "worst", "bias"])

    def breakdown(self) -> pd.DataFrame:
        """Where each scored run's predicted step goes: compute, exposed communication, pipeline bubble and
        every named overhead (seconds per step; they sum to predicted_s), beside the measured step."""
        t = self.scored
        named = sorted(c for c in t.columns if c.startswith(OVERHEAD_PREFIX))
        cols = ["run", "source_short", "gpu", "framework_family", "dtype", "measured_s", "predicted_s", "error",
                *BREAKDOWN, *named]
        out = t[cols].copy()
        out[named] = out[named].fillna(0.0)
        return out.reset_index(drop=True)

    def by_source(self) -> pd.DataFrame:
        """Mean absolute error per source (kept for the report)."""
        g = self.by_group()
        return g[g["group"] == "source_short"].drop(columns="group").rename(columns={"value": "source"})


def error_stats(err: pd.Series) -> dict:
    """runs, mean |e|, median |e|, worst e (largest |e|, signed) and bias (mean e) of signed errors e."""
    e = np.asarray(err, dtype=float)
    if e.size == 0:
        return {"runs": 0, "mae": float("nan"), "median": float("nan"), "worst": float("nan"), "bias": float("nan")}
    return {"runs": int(e.size), "mae": float(np.abs(e).mean()), "median": float(np.median(np.abs(e))),
            "worst": float(e[np.argmax(np.abs(e))]), "bias": float(e.mean())}


def read_data_csv(name: str, label: str, path=None) -> pd.DataFrame:
    """A CSV of studies/data (or the file at path instead), empty cells kept as ""; StudyError when unreadable."""
    try:
        if path is None:
            with resources.files("c3kit.studies").joinpath("data", name).open("r") as f:
                return pd.read_csv(f, keep_default_na=False)
        return pd.read_csv(path, keep_default_na=False)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise StudyError(f"cannot read {label} {path or name}: {e}") from None


def load_runs(path=None) -> pd.DataFrame:
    """The shipped runs (or a CSV with the same columns), with measured seconds per step filled in."""
    df = read_data_csv("validation_runs.csv", "validation runs", path)
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise StudyError(f"validation runs lack column(s) {', '.join(missing)}: see studies/data/README.md")
    if df.empty:
        raise StudyError(f"validation runs {path or 'validation_runs.csv'} hold no run")
    if not df["run"].is_unique:
        raise StudyError(f"validation runs: duplicate run name(s) {', '.join(df.loc[df['run'].duplicated(), 'run'])}")
    bad = sorted(set(df["measured_what"]) - set(MEASURES))
    if bad:
        raise StudyError(f"validation runs: unknown measured_what {', '.join(map(str, bad))}: use one of "
                         f"{', '.join(MEASURES)}")
    df = df.copy()
    try:
        df["measured_s"] = measured_step_time(df)
    except (TypeError, ValueError) as e:
        raise StudyError(f"validation runs: a size or measured value is not a number ({e})") from None
    bad_s = ~(df["measured_s"] > 0) | ~np.isfinite(df["measured_s"])
    if bad_s.any():
        raise StudyError(f"validation runs without a positive measured time: {', '.join(df.loc[bad_s, 'run'])}")
    return df


def _num(df: pd.DataFrame, col: str) -> np.ndarray:
    return pd.to_numeric(df[col], errors="raise").to_numpy(dtype=float)


def measured_step_time(df: pd.DataFrame) -> np.ndarray:
    """Seconds per step of every run from its published figure, by the row's `measured_what` formula."""
    what = df["measured_what"].to_numpy()
    v, g = _num(df, "measured_value"), _num(df, "gpus")
    tokens = _num(df, "global_batch") * _num(df, "seq")
    out = np.full(len(df), np.nan)
    out = np.where(what == "iteration_s", v, out)
    out = np.where(what == "tokens_per_s_total", tokens / np.where(v > 0, v, np.nan), out)
    out = np.where(what == "tokens_per_s_per_gpu", tokens / np.where(v > 0, v * g, np.nan), out)
    nar = what == "tflops_per_gpu_narayanan"
    if nar.any():
        out[nar] = narayanan_step_time(df[nar])
    palm = what == "tflops_per_gpu_palm"
    if palm.any():
        out[palm] = palm_step_time(df[palm])
    return out


def narayanan_step_time(df: pd.DataFrame) -> np.ndarray:
    """Step seconds from Narayanan et al.'s TFLOP/s per GPU and their eq. (3) FLOP count."""
    B, s, l, h, V = (_num(df, c) for c in ("global_batch", "seq", "layers", "hidden", "vocab"))
    flops = 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
    return flops / (_num(df, "measured_value") * 1e12 * _num(df, "gpus"))


def palm_step_time(df: pd.DataFrame) -> np.ndarray:
    """Step seconds from TFLOP/s per GPU with (6 N + 12 l h s) FLOP per token (PaLM, App. B)."""
    out = []
    for _, row in df.iterrows():
        m = model_of(row)
        n = m.param_count() - m.vocab * m.hidden  # without the input embedding
        per_token = 6 * n + 12 * m.layers * m.hidden * int(row["seq"])
        tokens = int(row["global_batch"]) * int(row["seq"])
        out.append(per_token * tokens / (float(row["measured_value"]) * 1e12 * int(row["gpus"])))
    return np.array(out)


BACKEND_COLUMNS = ("runs", "framework", "backend", "source", "reason")
NORM_ROPE_COLUMNS = ("runs", "framework", "norm_rope", "source", "reason")
FP8_RECIPE_COLUMNS = ("runs", "framework", "fp8_scaling", "source", "reason")
RECOMPUTE_COLUMNS = ("runs", "framework", "recompute", "source", "reason")
MOE_OPTION_COLUMNS = ("runs", "framework", "a2a_overlap", "dispatcher", "cuda_graph_scope", "source", "reason")
# Megatron-Core moe_token_dispatcher_type values, and the Transformer Engine CUDA-graph scopes of Megatron-Core
# (cuda_graph_scope; "none": no CUDA graphs) that moe_options.csv may name
MOE_DISPATCHERS = ("alltoall", "allgather", "flex")
CUDA_GRAPH_SCOPES = ("none", "full_iteration", "attn", "mlp", "moe", "moe_router", "moe_preprocess")
MOE_EXPERT_COLUMNS = ("runs", "framework", "experts", "source", "reason")


def _run_table(name: str, columns: tuple, check, path=None) -> pd.DataFrame:
    """A per-run table of studies/data (a run-name glob per row, the value, its source and reason), checked."""
    label = name.removesuffix(".csv").replace("_", " ")
    df = read_data_csv(name, label, path)
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise StudyError(f"{label} lack column(s) {', '.join(missing)}")
    for v in df[columns[2]]:
        check(str(v))
    return df


def _first_match(run: str, table: pd.DataFrame, column: str, default: str) -> str:
    """The value of the first table row whose run glob matches the run's name (default when none does)."""
    from fnmatch import fnmatchcase

    for glob, value in zip(table["runs"], table[column]):
        if fnmatchcase(str(run), str(glob)):
            return str(value)
    return default


def attention_backends(path=None) -> pd.DataFrame:
    """The attention backend of each run (studies/data/attention_backends.csv: a run-name glob, the framework,
    the backend, its source and the reason), decided from the frameworks' documentation and code."""
    from c3kit.workload.attention import check_backend

    return _run_table("attention_backends.csv", BACKEND_COLUMNS, check_backend, path)


def attention_backend_of(run: str, table: pd.DataFrame | None = None) -> str:
    """The backend of a run: the first row of the table whose glob matches its name ("" = the GPU's default)."""
    return _first_match(run, attention_backends() if table is None else table, "backend", "")


def norm_rope_code(path=None) -> pd.DataFrame:
    """How each run's RMSNorm and RoPE ran (studies/data/norm_rope.csv: run glob, framework, fused or eager,
    source, reason), decided from the frameworks' code and configs."""
    from c3kit.workload.layer import check_norm_rope

    return _run_table("norm_rope.csv", NORM_ROPE_COLUMNS, check_norm_rope, path)


def norm_rope_of(run: str, table: pd.DataFrame | None = None) -> str:
    """fused or eager for a run: the first matching row of the table (fused when none matches)."""
    return _first_match(run, norm_rope_code() if table is None else table, "norm_rope", "fused")


def _one_of(table: str, column: str, module: str, name: str):
    """A check of one cell of a run table: the value must be a key of `module`.`name` (imported when first checked,
    so the table and the model share one list), else a StudyError naming the table and column."""

    def check(value: str) -> str:
        import importlib

        allowed = getattr(importlib.import_module(module), name)
        if value not in allowed:
            raise StudyError(f"{table}: unknown {column} {value!r}: use one of {', '.join(allowed)}")
        return value

    return check


_check_fp8_scaling = _one_of("fp8 recipes", "fp8_scaling", "c3kit.step.overheads", "FP8_SCALING")


def fp8_recipes(path=None) -> pd.DataFrame:
    """The FP8 scaling recipe of each FP8 run (studies/data/fp8_recipes.csv: run glob, framework, recipe of
    step.overheads.FP8_SCALING, source, reason), decided from the frameworks' code and the tables' precision."""
    return _run_table("fp8_recipes.csv", FP8_RECIPE_COLUMNS, _check_fp8_scaling, path)


def fp8_scaling_of(run: str, table: pd.DataFrame | None = None) -> str:
    """The FP8 recipe of a run: the first matching row of the table ("" when none matches: the default)."""
    return _first_match(run, fp8_recipes() if table is None else table, "fp8_scaling", "")


_check_recompute = _one_of("recompute modes", "recompute", "c3kit.workload.parallel", "RECOMPUTE")


def recompute_modes(path=None) -> pd.DataFrame:
    """What a run's "selective" activation checkpointing recomputes (studies/data/recompute_modes.csv: run glob,
    framework, a mode of workload.parallel.RECOMPUTE, source, reason), decided from the framework's code and the
    run's config: torchtitan's op-level policy ("op") and every-N-th-layer checkpointing ("layer")."""
    return _run_table("recompute_modes.csv", RECOMPUTE_COLUMNS, _check_recompute, path)


def recompute_of(run: str, stated: str, table: pd.DataFrame | None = None) -> str:
    """The recompute mode of a run: for a run whose source states selective recomputation, the first matching row
    of the table (the stated mode when none matches: Megatron's attention-core recompute); otherwise as stated."""
    if stated != "selective":
        return stated
    return _first_match(run, recompute_modes() if table is None else table, "recompute", stated)


def _check_flag(v: str) -> str:
    if v not in ("0", "1"):
        raise StudyError(f"moe options: a2a_overlap must be 0 or 1, got {v!r}")
    return v


PP_OPTION_COLUMNS = ("runs", "framework", "p2p_overlap", "source", "reason")


def _check_p2p(v: str) -> str:
    if v not in ("0", "1"):
        raise StudyError(f"pp options: p2p_overlap must be 0 or 1, got {v!r}")
    return v


def pp_options(path=None) -> pd.DataFrame:
    """The pipeline options of each pipelined run's recipe (studies/data/pp_options.csv: run glob, framework,
    p2p_overlap 0/1 = Megatron-Core overlap_p2p_comm, source, reason), decided from the framework's recipe code."""
    return _run_table("pp_options.csv", PP_OPTION_COLUMNS, _check_p2p, path)


def pp_p2p_overlap_of(run: str, table: pd.DataFrame | None = None) -> bool:
    """Whether a run's pipeline sends and receives overlap compute (first matching row; off when none matches)."""
    return _first_match(run, pp_options() if table is None else table, "p2p_overlap", "0") == "1"


PP_ENGINE_COLUMNS = ("runs", "framework", "pp_engine", "source", "reason")


_check_pp_engine = _one_of("pp engines", "pp_engine", "c3kit.workload.parallel", "PP_ENGINES")


def pp_engines(path=None) -> pd.DataFrame:
    """The pipeline engine of each pipelined run's framework (studies/data/pp_engines.csv: run glob, framework, a name of
    workload.parallel.PP_ENGINES, source, reason), decided from the framework's code."""
    return _run_table("pp_engines.csv", PP_ENGINE_COLUMNS, _check_pp_engine, path)


def pp_engine_of(run: str, table: pd.DataFrame | None = None) -> str:
    """How a run's pipeline stages exchange tensors (first matching row; "megatron" when none matches)."""
    return _first_match(run, pp_engines() if table is None else table, "pp_engine", "megatron")


TP_OVERLAP_COLUMNS = ("runs", "framework", "tp_comm_overlap", "ub_cfg", "gemm_methods", "source", "config_source",
                      "reason")


_check_tp_comm_overlap = _one_of("tp overlap", "tp_comm_overlap", "c3kit.workload.parallel", "TP_COMM_OVERLAPS")


def gemm_methods(text: str) -> dict[str, tuple[str, bool, dict]]:
    """A tp_overlap.csv gemm_methods cell: "qkv_fprop=ring_exchange; proj_fprop=pipeline(num_sm 24, set_sm_margin 1);
    ..." -> {TE GEMM name: (method, set_sm_margin, {other parameter: int})}; StudyError where malformed."""
    import re

    out = {}
    for part in (x.strip() for x in str(text).split(";")):
        if not part:
            continue
        m = re.fullmatch(r"(\w+)=(\w+)(?:\(([^()]*)\))?", part)
        if m is None:
            raise StudyError(f"tp overlap: malformed gemm method {part!r}: write name=method(key value, ...)")
        params = {}
        for kv in filter(None, (x.strip() for x in (m.group(3) or "").split(","))):
            k, _, v = kv.partition(" ")
            if not v.strip().isdigit():
                raise StudyError(f"tp overlap: parameter {kv!r} of {m.group(1)} is not 'name integer'")
            params[k] = int(v)
        out[m.group(1)] = (m.group(2), bool(params.pop("set_sm_margin", 0)), params)
    return out


def tp_overlaps(path=None) -> pd.DataFrame:
    """Transformer Engine's userbuffers TP overlap of each run's recipe (studies/data/tp_overlap.csv: run glob, framework,
    a name of workload.parallel.TP_COMM_OVERLAPS, the userbuffers config, its per-GEMM methods and parameters, the recipe
    and config sources, reason); StudyError where a row's per-GEMM methods are not those its name prices."""
    from c3kit.workload.parallel import TP_COMM_OVERLAP_METHODS

    df = _run_table("tp_overlap.csv", TP_OVERLAP_COLUMNS, _check_tp_comm_overlap, path)
    for glob, name, cell in zip(df["runs"], df["tp_comm_overlap"], df["gemm_methods"]):
        got = {k: v[:2] for k, v in gemm_methods(cell).items()}
        if got != TP_COMM_OVERLAP_METHODS[str(name)]:
            raise StudyError(f"tp overlap: row {glob}: its gemm_methods are not the methods of {name} "
                             "(workload.parallel.TP_COMM_OVERLAP_METHODS)")
    return df


def tp_comm_overlap_of(run: str, table: pd.DataFrame | None = None) -> str:
    """A run's TE userbuffers TP overlap (first matching row of tp_overlap.csv; "none" when none matches)."""
    return _first_match(run, tp_overlaps() if table is None else table, "tp_comm_overlap", "none")


def dp_overlap_of(framework: str, source: str, fsdp: bool = False) -> bool:
    """Whether a run's framework reduces the data-parallel gradients behind the backward (workload.parallel.
    DP_OVERLAP_SOURCES), from its code: not for Megatron-DeepSpeed (DeepSpeed's pipeline engine reduces after the
    step's last backward) nor Megatron-LM of 2021-22 (its default local DDP all-reduces after forward_backward_func;
    the year is the source's), overlapped for every other framework (Megatron-Core's --overlap-grad-reduce, which
    NeMo and Megatron-Bridge turn on with data parallelism; FSDP's post-backward hooks)."""
    import re

    f = str(framework).lower()
    if fsdp:
        return True
    if "deepspeed" in f:
        return False
    years = [int(y) for y in re.findall(r"\b(20\d\d)\b", str(source))]
    return not (f.startswith("megatron-lm") and "nemo" not in f and years and min(years) <= 2022)


FSDP_PRECISION_COLUMNS = ("runs", "framework", "reduce_dtype", "source", "reason")


def _check_reduce_dtype(v: str) -> str:
    from c3kit.workload.layer import GRAD_REDUCE_DTYPES

    if v not in GRAD_REDUCE_DTYPES:
        raise StudyError(f"fsdp precision: reduce_dtype must be one of {', '.join(GRAD_REDUCE_DTYPES)}, got {v!r}")
    return v


def fsdp_precision(path=None) -> pd.DataFrame:
    """The dtype each FSDP run reduce-scatters its gradients in (studies/data/fsdp_precision.csv: run glob, framework,
    reduce_dtype fp32 / bf16, source, reason), decided from the framework's mixed-precision code and the launch
    script or table that states the run's mode (Composer's FSDP mixed_precision DEFAULT: fp32, PURE: bf16)."""
    return _run_table("fsdp_precision.csv", FSDP_PRECISION_COLUMNS, _check_reduce_dtype, path)


def grad_reduce_dtype_of(run: str, fsdp: bool = True, table: pd.DataFrame | None = None) -> str:
    """The dtype a run's gradients are reduced in (workload.graph.build_step grad_dtype): for an FSDP run the first
    matching row of the table; fp32 otherwise or when none matches (the layer description's default)."""
    if not fsdp:
        return "fp32"
    return _first_match(run, fsdp_precision() if table is None else table, "reduce_dtype", "fp32")


def moe_options(path=None) -> pd.DataFrame:
    """The MoE options of each MoE run's recipe (studies/data/moe_options.csv: run glob, framework, a2a_overlap 0/1 =
    Megatron-Core overlap_moe_expert_parallel_comm, dispatcher (MOE_DISPATCHERS), cuda_graph_scope (CUDA_GRAPH_SCOPES,
    space-separated), source, reason), decided from the recipe whose layout matches the published one."""
    df = _run_table("moe_options.csv", MOE_OPTION_COLUMNS, _check_flag, path)
    for d, scope in zip(df["dispatcher"].astype(str), df["cuda_graph_scope"].astype(str)):
        if d not in MOE_DISPATCHERS:
            raise StudyError(f"moe options: unknown dispatcher {d!r}: use one of {', '.join(MOE_DISPATCHERS)}")
        bad = [x for x in scope.split() if x not in CUDA_GRAPH_SCOPES] or ([] if scope.split() else [scope])
        if bad:
            raise StudyError(f"moe options: unknown cuda_graph_scope {' '.join(bad)!r}: use 'none' or scopes of "
                             f"{', '.join(CUDA_GRAPH_SCOPES[1:])}")
    return df


def moe_dispatcher_of(run: str, table: pd.DataFrame | None = None) -> str:
    """The token dispatcher a MoE run's recipe ran (first matching row; Megatron-Core's default alltoall when none)."""
    return _first_match(run, moe_options() if table is None else table, "dispatcher", "alltoall")


def moe_a2a_overlap_of(run: str, table: pd.DataFrame | None = None) -> bool:
    """Whether a run's EP all-to-alls overlap another micro-batch's compute (first matching row; off when none)."""
    return _first_match(run, moe_options() if table is None else table, "a2a_overlap", "0") == "1"


_check_moe_experts = _one_of("moe experts", "experts", "c3kit.step.overheads", "MOE_EXPERTS")


def moe_experts_table(path=None) -> pd.DataFrame:
    """How each MoE run's local experts' GEMMs ran (studies/data/moe_experts.csv: run glob, framework, a key of
    step.overheads.MOE_EXPERTS, source, reason), decided from the framework's code."""
    return _run_table("moe_experts.csv", MOE_EXPERT_COLUMNS, _check_moe_experts, path)


def moe_experts_of(run: str, table: pd.DataFrame | None = None) -> str:
    """grouped, per_expert or sequential for a run: the first matching row of the table (grouped when none does)."""
    return _first_match(run, moe_experts_table() if table is None else table, "experts", "grouped")


def model_of(row):
    """The ModelConfig of one run (0 in kv_heads / head_dim / ffn sizes: ModelConfig's defaults)."""
    from c3kit.workload.model import ModelConfig

    return ModelConfig(
        name=str(row["run"]), hidden=int(row["hidden"]), layers=int(row["layers"]), heads=int(row["heads"]),
        kv_heads=int(row["kv_heads"]), head_dim=int(row["head_dim"]), ffn_hidden=int(row["ffn_hidden"]),
        vocab=int(row["vocab"]), gated_mlp=bool(int(row["gated_mlp"])), norm=str(row["norm"]),
        n_experts=int(row["n_experts"]), top_k=int(row["top_k"]), moe_ffn_hidden=int(row["moe_ffn_hidden"]),
        max_seq=int(row["seq"]), tied_embeddings=bool(int(row["tied_embeddings"])), position=str(row["position"]),
        bias=bool(int(row["bias"])), dropout=bool(int(row["dropout"])))


def unmodelled(row) -> list[str]:
    """Features of a run's layout that the layer description cannot express yet (empty: fully modelled)."""
    from c3kit.workload.parallel import Parallelism

    fields = Parallelism.__dataclass_fields__
    lack = []
    if int(row["cp"]) > 1 and "cp" not in fields:
        lack.append(f"context parallelism (cp {int(row['cp'])})")
    if int(row["zero"]) == 2 and not int(row["fsdp"]) and "zero2" not in fields:
        lack.append("ZeRO-2 (gradient sharding without FSDP)")
    return lack


def pipeline_splits() -> dict[str, str]:
    """run -> pp_split of the runs whose framework splits layers unevenly (studies/data/pipeline_splits.csv,
    each with the framework source it follows); runs not listed use Parallelism's default ("even")."""
    df = read_data_csv("pipeline_splits.csv", "pipeline splits")
    return dict(zip(df["run"].astype(str), df["pp_split"].astype(str)))


def layout_of(row):
    """The Parallelism of one run; raises StudyError (naming the feature) where it cannot be expressed."""
    from c3kit.workload.parallel import Parallelism

    lack = unmodelled(row)
    if lack:
        raise StudyError("not modelled: " + "; ".join(lack))
    fields = Parallelism.__dataclass_fields__
    kw = dict(tp=int(row["tp"]), sp=bool(int(row["sp"])), dp=int(row["dp"]), pp=int(row["pp"]), vpp=int(row["vpp"]),
              ep=int(row["ep"]), fsdp=bool(int(row["fsdp"])), micro_batch=int(row["micro_batch"]),
              global_batch=int(row["global_batch"]), recompute=recompute_of(str(row["run"]), str(row["recompute"])),
              dist_optimizer=int(row["zero"]) >= 1 and not int(row["fsdp"]) and int(row["dp"]) > 1,
              pp_split=pipeline_splits().get(str(row["run"]), "even"),
              fsdp_sync=fsdp_sync_of(row["framework"], int(row["pp"]), bool(int(row["fsdp"]))),
              moe_a2a_overlap=moe_a2a_overlap_of(str(row["run"])),
              dp_overlap=bool(int(row["dp_overlap"])) and dp_overlap_of(row["framework"], row["source"], bool(int(row["fsdp"]))),
              pp_p2p_overlap=pp_p2p_overlap_of(str(row["run"])),
              tp_comm_overlap=tp_comm_overlap_of(str(row["run"])))
    if int(row["pp"]) > 1:
        kw["pp_engine"] = pp_engine_of(str(row["run"]))
    if "cp" in fields:
        kw["cp"] = int(row["cp"])
        if kw["cp"] > 1:
            kw["cp_impl"] = cp_impl_of(row["framework"])
    if int(row["zero"]) == 2 and not int(row["fsdp"]):  # ZeRO-2: Parallelism.zero2 (gradients sharded as well)
        kw["zero2"] = True
    p = Parallelism(**kw)
    if p.gpus != int(row["gpus"]):
        raise StudyError(f"run {row['run']}: the layout covers {p.gpus} GPUs, the row says {row['gpus']}")
    return p


def run_objects(row):
    """(ModelConfig, Parallelism) of one run, checked against each other."""
    m, p = model_of(row), layout_of(row)
    p.validate(m, int(row["gpus"]))
    return m, p


def fsdp_impl_of(framework: str) -> str:
    """How a run's framework shards weights (step.overheads.FSDP_IMPLS): torchtitan runs PyTorch FSDP2
    (per-parameter sharding, fully_shard); llm-foundry's Composer (FSDP1 FlatParameter, the 2023 tables)
    and Megatron FSDP gather into flat buffers the parameters view ("flat")."""
    f = str(framework).lower()
    return "fsdp2" if "torchtitan" in f or "fsdp2" in f else "flat"


def optimizer_impl_of(framework: str) -> str:
    """How a run's framework runs AdamW (step.overheads.OPTIMIZER_IMPLS), from its code: llm-foundry "unfused"
    (its yamls train with Composer's DecoupledAdamW, whose adamw loops over the parameter tensors with 9 eager
    kernels each: composer/optim/decoupled_weight_decay.py); every other framework "fused" (Megatron's and NeMo's
    apex / Transformer Engine FusedAdam and distributed optimizer, torchtitan's AdamW with fused=True)."""
    return "unfused" if "llm-foundry" in str(framework).lower() else "fused"


def fsdp_sync_of(framework: str, pp: int, fsdp: bool) -> str:
    """How often a run's FSDP gathers parameters and reduce-scatters gradients (workload.parallel.FSDP_SYNC), from
    its framework's code: torchtitan with pipeline parallelism "step" (parallelize_llama.py apply_fsdp passes
    reshard_after_forward=False when pp is enabled, and torch.distributed.pipelining's
    _PipelineStageBase.backward_maybe_with_nosync turns FSDP's gradient sync and resharding off until the last
    micro-batch's backward: parallel.FSDP_SYNC_SOURCES); every other run "micro" (FSDP's defaults: llm-foundry's
    FSDP1 FULL_SHARD, torchtitan without PP, which has no gradient accumulation over micro-batches in these rows)."""
    f = str(framework).lower()
    return "step" if fsdp and pp > 1 and "torchtitan" in f else "micro"


def glue_of(framework: str, norm_rope: str = "eager") -> str:
    """The backward glue of a run's code (workload.layer.GLUE), from its framework's code: Megatron-Core with
    Transformer Engine (NeMo, Megatron-Bridge) "fused" (SplitAlongDim's copy-free backward, fused SwiGLU);
    torchtitan "separate" (wq / wk / wv and w1 / w3 projections), "fused" when compiled (its norm_rope row says
    fused: torch.compile); Megatron-LM / Megatron-DeepSpeed of 2021-2022 (megatron/model/transformer.py
    split_tensor_along_last_dim of the fused QKV output), llm-foundry (Wqkv output split) and code not public
    "split", the library's default."""
    f = str(framework).lower()
    if "megatron-core" in f or "transformer engine" in f or "nemo" in f:
        return "fused"
    if "torchtitan" in f:
        return "fused" if norm_rope == "fused" else "separate"
    return "split"


def grad_acc_of(framework: str, source: str, fsdp_sync: str = "micro") -> str:
    """How a run's weight gradients accumulate over micro-batches (workload.layer.GRAD_ACC; "" = the layer
    description's default: eager adds after the first micro-batch, none for glue "fused"). Megatron-LM accumulates
    inside the wgrad GEMM since 2022-02-13 (gradient accumulation fusion into the fp32 main_grad, on by default,
    Megatron-LM commit 83b1e42f30): "none"; its 2021 code (since commit b4bc51b1e7, 2021-03-08) added every
    micro-batch's gradient into main_grad in a hook (param.main_grad.add_): "every" (fp32). FSDP once per step
    (fsdp_sync "step", torchtitan with PP): "micro", compiled or not: FSDP2's post-backward hook, outside the
    compiled blocks, adds each later micro-batch's unsharded gradient into its reduce-dtype (fp32) accumulator
    (torch/distributed/fsdp/_fully_shard/_fsdp_param.py accumulate_unsharded_grad_if_needed, called from
    _fsdp_param_group.py FSDPParamGroup.post_backward)."""
    f = str(framework).lower()
    if fsdp_sync == "step":
        return "micro"
    if ("megatron-lm" in f or "megatron-core" in f or "nemo" in f) and "deepspeed" not in f:
        return "every" if "2021" in str(source) else "none"
    return ""


# layer-description ops that price a framework's own work (not the model's): breakdown column -> the ops' roles
FRAMEWORK_TERMS = {"train_metrics": ("train_metrics",), "cp_merge": ("cp_merge", "re_cp_merge"),
                   "fsdp_grad_cat": ("fsdp_grad_cat",)}


def flat_param_grads_of(framework: str, fsdp: bool) -> bool:
    """Whether a run's FSDP is PyTorch FSDP1, whose FlatParameter views make autograd concatenate each unit's
    gradients (workload.layer.FLAT_PARAM_GRADS): llm-foundry's Composer with FSDP (torch 1.13 and 2.1
    FullyShardedDataParallel); not torchtitan (FSDP2, per-parameter sharding) nor Megatron FSDP (gradients written
    into its contiguous buffers)."""
    return bool(fsdp) and "llm-foundry" in str(framework).lower()


def loss_kernel_of(framework: str) -> str:
    """Which cross-entropy kernels a run's training loss runs (workload.layer.LOSS_KERNELS), from its framework's code:
    llm-foundry "xentropy" (ComposerMPTCausalLM's loss_fn defaults to 'fused_crossentropy', flash-attn's
    CrossEntropyLoss on xentropy_cuda_lib, which the [gpu] extra installs: llmfoundry/models/mpt/modeling_mpt.py at
    v0.3.0 54cbb8bd, the code submit_benchmarks.py runs, and the May 2023 MosaicGPT of the A100 70B rows,
    llmfoundry/models/mosaic_gpt/mosaic_gpt.py at 300cc5c5; the benchmark yamls set no loss_fn); every other
    framework "eager", the kernels c3kit measured as kind cross_entropy."""
    return "xentropy" if "llm-foundry" in str(framework).lower() else "eager"


def bias_grads_of(framework: str, dtype: str) -> bool:
    """Whether a run's biased linears reduce their bias gradients in kernels of their own (workload.layer.BIAS_GRADS),
    from its framework's code: llm-foundry's MPT blocks in bf16 (torch.nn.Linear with bias, no_bias False: addmm
    forward, autograd's sum over the tokens backward); not its FP8 runs, whose fc_type 'te' Linear fuses the bias
    gradient into the output gradient's FP8 cast (Transformer Engine fp8_cast_transpose_bgrad_fused); not the other
    frameworks, whose bias code (Megatron's fused bias-GeLU and bias-dropout-add) is not described here."""
    return "llm-foundry" in str(framework).lower() and str(dtype) != "fp8"


def metrics_fp32_of(framework: str, dtype: str) -> bool:
    """Whether a run's training metrics score fp32 logits (workload.layer.METRICS_BF16), from its framework's code:
    llm-foundry's Composer evaluates them inside its precision context, torch.autocast(bfloat16) under amp_bf16 (which
    casts cross_entropy's input to fp32) but only te.fp8_autocast under amp_fp8 (the logits stay bf16); frameworks
    without training metrics: True, unused."""
    return not ("llm-foundry" in str(framework).lower() and str(dtype) == "fp8")


def cp_impl_of(framework: str) -> str:
    """How a run's context parallelism runs (workload.parallel.CP_IMPLS), from its framework's code: torchtitan
    "torch" (torch.distributed.tensor.experimental context_parallel, all-gathered KV after repeat_kv, fp32 merges:
    parallel.CP_IMPL_SOURCES); Megatron-Core / Transformer Engine "ring" (the layer description's default)."""
    return "torch" if "torchtitan" in str(framework).lower() else "ring"


def train_metrics_of(framework: str) -> int:
    """Cross-entropy passes over the logits per micro-batch that a run's framework adds for training metrics
    (workload.layer.check_train_metrics), from its code: llm-foundry 2 (the tables' llm-foundry v0.3.0 pins Composer
    >=0.16.3,<0.17, whose Trainer._train_microbatch calls _eval_train_metrics after every micro-batch's backward;
    ComposerMPTCausalLM's train metrics are LanguageCrossEntropy and LanguagePerplexity, each a
    torch.nn.CrossEntropyLoss(reduction='sum') over the micro-batch's logits, composer/metrics/nlp.py); every other
    framework 0 (Megatron, NeMo and torchtitan log the training loss only). The A100 70B rows, from May 2023, ran
    Composer 0.13.4 and MosaicGPT with the same two train metrics, updated at the same place of _train_microbatch."""
    return 2 if "llm-foundry" in str(framework).lower() else 0


def default_cost_model():
    """The cost model `c3kit analyze` prices with by default: efficiency, sustained (power-capped) clocks."""
    from c3kit.cost.model import as_model

    return as_model("efficiency").with_(power="sustained")


def predict(row, cost_model=None, policy=None, gpu=None) -> dict:
    """Projected step of one run (seconds per GPU) by the same path as `c3kit analyze` (gpu: a GPU object to price
    on instead of the row's catalog GPU)."""
    from c3kit.hw import get_gpu
    from c3kit.step import project
    from c3kit.step.overheads import DEFAULT_OVERHEADS
    from c3kit.workload.graph import build_step

    m, p = run_objects(row)
    if policy is None:  # the same default mode as `c3kit analyze`
        from c3kit.step.policy import DEFAULT_MODE, policy_for

        policy = policy_for(DEFAULT_MODE)
    gpu = get_gpu(str(row["gpu"])) if gpu is None else gpu
    cm = default_cost_model() if cost_model is None else cost_model
    code = norm_rope_of(str(row["run"]))
    g = build_step(m, p, "train", int(row["seq"]), str(row["dtype"]), gpu.gpus_per_node,
                   grad_dtype=grad_reduce_dtype_of(str(row["run"]), p.fsdp),
                   attn_backend=attention_backend_of(str(row["run"])), norm_rope=code,
                   glue=glue_of(row["framework"], code),
                   grad_acc=grad_acc_of(row["framework"], row["source"], p.fsdp_sync),
                   train_metrics=train_metrics_of(row["framework"]),
                   flat_param_grads=flat_param_grads_of(row["framework"], p.fsdp),
                   loss_kernel=loss_kernel_of(row["framework"]),
                   bias_grads=bias_grads_of(row["framework"], str(row["dtype"])),
                   metrics_fp32=metrics_fp32_of(row["framework"], str(row["dtype"])))
    ovh = DEFAULT_OVERHEADS
    if p.fsdp and fsdp_impl_of(row["framework"]) != ovh.fsdp_impl:  # the framework's FSDP, from its docs
        ovh = replace(ovh, fsdp_impl=fsdp_impl_of(row["framework"]))
    if optimizer_impl_of(row["framework"]) != ovh.optimizer_impl:  # the framework's AdamW, from its code
        ovh = replace(ovh, optimizer_impl=optimizer_impl_of(row["framework"]))
    recipe = fp8_scaling_of(str(row["run"])) if str(row["dtype"]) == "fp8" else ""
    if recipe and recipe != ovh.fp8_scaling:  # the framework's FP8 recipe (studies/data/fp8_recipes.csv)
        ovh = replace(ovh, fp8_scaling=recipe)
    experts = moe_experts_of(str(row["run"])) if m.is_moe else ovh.moe_experts
    if experts != ovh.moe_experts:  # how the framework runs the experts' GEMMs (studies/data/moe_experts.csv)
        ovh = replace(ovh, moe_experts=experts)
    r = project(g, gpu, cost_model=cm, policy=policy, overheads=ovh)  # as `c3kit analyze`
    t = r.totals
    step = t.step_time
    named = {OVERHEAD_PREFIX + x.name: x.compute_s for x in r.rows if x.role.startswith("overhead.")}
    terms = {OVERHEAD_PREFIX + name: sum(x.compute_s for x in r.rows if x.role in roles)
             for name, roles in FRAMEWORK_TERMS.items()}
    named.update({k: v for k, v in terms.items() if v > 0})  # on the compute stream: moved out of compute_s
    return {"predicted_s": step, "compute_s": t.compute - sum(terms.values()), "comm_s": t.comm,
            "exposed_s": t.exposed, "bubble_s": t.bubble,
            "overhead_s": t.overhead,
            "mfu_predicted": t.mfu, **named}


def op_basis_of(gpu: str) -> str:
    """How a run's GPU is priced (cost/basis.py): "measured", "transferred from X" or "datasheet" when every
    op class of BASIS_CLASSES shares it, else the GEMM class's basis with ", partly datasheet"."""
    from c3kit.cost.basis import basis

    b = basis(str(gpu))
    labels = {b[c] for c in BASIS_CLASSES}
    if len(labels) == 1:
        return labels.pop()
    return f"{b['gemm']}, partly datasheet" if "datasheet" in labels else b["gemm"]


def _short(source: str) -> str:
    return str(source).split(",")[0]


def _family(framework: str) -> str:
    f = str(framework).lower()
    return "fsdp" if ("fsdp" in f and "megatron" not in f) or "torchtitan" in f or "llm-foundry" in f else "megatron"


def _layout(row) -> str:
    ub = tp_comm_overlap_of(str(row["run"])) if int(row["tp"]) > 1 else "none"  # TE userbuffers (tp_overlap.csv)
    parts = [f"tp{row['tp']}{'+sp' if int(row['sp']) and int(row['tp']) > 1 else ''}{'' if ub == 'none' else '+ub:' + ub}",
             f"pp{row['pp']}{'x' + str(row['vpp']) if int(row['vpp']) > 1 else ''}"]
    if int(row["cp"]) > 1:
        parts.append(f"cp{row['cp']}")
    parts.append(f"dp{row['dp']}{' fsdp' if int(row['fsdp']) else ' zero1' if int(row['zero']) == 1 else ''}")
    if int(row["ep"]) > 1:
        parts.append(f"ep{row['ep']}")
    parts.append(f"mb{row['micro_batch']} gb{row['global_batch']} {row['recompute']}")
    return " ".join(parts)


def validate(cost_model=None, runs: pd.DataFrame | None = None, policy=None,
             progress: Callable[[int, int, str], None] | None = None) -> ValidationResult:
    """Predict every run and compare (error = predicted / measured - 1); runs the model lacks are listed."""
    runs = load_runs() if runs is None else runs
    cm = default_cost_model() if cost_model is None else cost_model
    rows = []
    n = len(runs)
    for i, (_, row) in enumerate(runs.iterrows()):
        if progress is not None:
            progress(i, n, str(row["run"]))
        base = {"run": row["run"], "source_short": _short(row["source"]), "gpu": row["gpu"],
                "op_basis": op_basis_of(row["gpu"]),
                "framework": row["framework"], "framework_family": _family(row["framework"]), "dtype": row["dtype"],
                "kind": "moe" if int(row["n_experts"]) > 1 else "dense", "gpus": int(row["gpus"]),
                "seq": int(row["seq"]), "layout": _layout(row), "measured_s": float(row["measured_s"])}
        try:
            pred = predict(row, cm, policy)
            status = "scored"
        except StudyError as e:
            pred, status = {}, str(e) if str(e).startswith("not modelled") else f"not modelled: {e}"
        except C3kitError as e:  # a layout the layer description rejects (e.g. 126 layers on 16 stages)
            pred, status = {}, f"not modelled: {e}"
        rows.append({**base, "status": status, **pred})
    if progress is not None:
        progress(n, n, "")
    t = pd.DataFrame(rows)
    for c in ("predicted_s", "compute_s", "comm_s", "exposed_s", "bubble_s", "overhead_s", "mfu_predicted"):
        if c not in t.columns:
            t[c] = np.nan
    t["error"] = t["predicted_s"] / t["measured_s"] - 1
    name = getattr(cm, "kind", str(cm))
    power = getattr(cm, "power", "")
    notes = [f"Every run priced by the model `c3kit analyze` uses: c3kit.cost {name!r} ({power} clocks), "
             "c3kit.step overlap (ops overlap where dependencies allow), no parameter taken from these runs, no "
             "per-run factor: the errors are out of sample.",
             "Measured seconds per step come from each source's published figure by the formula in the row "
             "(studies/data/README.md); values a source does not state are listed in the row's 'assumed' column.",
             "Runs whose layout needs a feature the model lacks are listed as 'not modelled' and excluded from the "
             "statistics.",
             "Framework facts taken from each framework's documentation or code, never from these runs: how layers "
             "split over pipeline stages (studies/data/pipeline_splits.csv, workload.parallel.PP_SPLIT_SOURCES), "
             "which FSDP implementation shards the weights (fsdp_impl_of: FSDP2 for torchtitan, flat buffers for "
             "llm-foundry's FSDP1 and Megatron FSDP), which attention kernel ran (studies/data/attention_backends.csv), "
             "whether RMSNorm and RoPE ran as fused kernels or eager fp32 code (studies/data/norm_rope.csv), which "
             "FP8 scaling recipe cast the FP8 GEMMs' operands (studies/data/fp8_recipes.csv), what a run's selective "
             "activation checkpointing recomputes (studies/data/recompute_modes.csv: torchtitan's op policy or "
             "every-N-th-layer checkpointing), whether a MoE run's expert-parallel all-to-alls overlap another micro-batch's "
             "compute (studies/data/moe_options.csv: Megatron-Core overlap_moe_expert_parallel_comm, from the recipe "
             "whose layout matches the published one), how a MoE run's local experts' GEMMs ran (studies/data/moe_experts.csv: "
             "Transformer Engine GroupedLinear, one cuBLAS GEMM per expert; term 'moe_per_expert'), "
             "which memory-bound glue the backward runs (glue_of: split QKV / gate-up copies, separate projections' "
             "adds, or none with Megatron-Core and Transformer Engine), how gradients accumulate over "
             "micro-batches (grad_acc_of) and how often FSDP gathers parameters and reduce-scatters gradients "
             "(fsdp_sync_of: once per step for torchtitan with pipeline parallelism, whose apply_fsdp keeps "
             "parameters unsharded after forward and whose pipeline schedules defer the gradient sync to the last "
             "micro-batch; every micro-batch otherwise) and which training metrics the framework evaluates after every "
             "micro-batch (train_metrics_of: llm-foundry's Composer computes cross-entropy and perplexity over the "
             "logits, op and breakdown column 'train_metrics') and how context parallelism runs (cp_impl_of: torch's "
             "context_parallel for torchtitan, all-gathered GQA-expanded KV and fp32 merges, op and breakdown column "
             "'cp_merge'; a ring beside the attention otherwise) and whether FSDP1's flat parameters make autograd "
             "concatenate every unit's gradients (flat_param_grads_of: llm-foundry; op and breakdown column "
             "'fsdp_grad_cat') and which AdamW runs (optimizer_impl_of: Composer's per-tensor DecoupledAdamW loop for "
             "llm-foundry, breakdown column 'optimizer_unfused') and whether the data-parallel gradient reduction runs "
             "behind the backward (dp_overlap_of: after it for Megatron-LM of 2021-22 and Megatron-DeepSpeed) and "
             "whether pipeline sends and receives overlap compute (studies/data/pp_options.csv: Megatron-Core "
             "overlap_p2p_comm, set by NeMo's and Megatron-Bridge's recipes with interleaving) and how pipeline stages "
             "exchange tensors (studies/data/pp_engines.csv: DeepSpeed's pipeline engine for MT-NLG, blocking transfers "
             "of 1/tp slices in turn with meta sends and TP all-gathers) and whether Transformer "
             "Engine's userbuffers overlap the sequence-parallel all-gathers and reduce-scatters with the GEMMs beside "
             "them (studies/data/tp_overlap.csv: NeMo's ub_tp_comm_overlap and Megatron-Bridge's tp_comm_overlap with "
             "the per-GEMM methods of the recipe's userbuffers config; each pair then priced by its method's "
             "overlap-engine schedule: ring_exchange the chunked copy-engine ring, pipeline the chunked SM-kernel "
             "reduce-scatter, bulk an SM collective on a high-priority stream beside the GEMM, step/tpcomm.py).",
             "Op basis (group 'op_basis', cost/basis.py): runs on GPUs without op-level measurements of their own or "
             "a documented transfer (A100, B200) take GEMMs, fused attention (A100 FlashAttention-2 and FlashAttention "
             "(v1), B200 cuDNN SDPA) "
             "and on A100 STREAM bandwidth, nccl-tests all-reduce bandwidth and the sustained-clock (power) factor "
             "(steady-state cuBLASLt GEMMs), on B200 streaming bandwidth (CCCL's nvbench DeviceTransform rows) "
             "from published op-level microbenchmarks "
             "(cost/published.py, docs/published-calibration.md; the table 'Op basis per GPU and op class' says which) "
             "and the rest from the datasheet: B200 all-reduces at an assumed 80% of link bandwidth, no measured "
             "per-kernel cost, no sustained-clock (power) factor (no published steady-state B200 GEMM found). H100 and "
             "B200 all-to-alls, all-gathers and reduce-scatters run at the levels of XLA's published NCCL table (sm_90, "
             "sm_100; classes collective_a2a, _ag, _rs), their all-reduces at the assumed 80%. On H100, where "
             "both exist, the datasheet basis prices the same steps faster than the measured one (tests/studies/"
             "test_validation.py): datasheet-basis errors carry that optimism; those GPUs are not yet measured. "
             "Attention per backend (table 'Attention basis per GPU and backend'): llm-foundry's Triton kernel runs as "
             "the flash1 class, on A100 and H100 from FlashAttention (v1)'s published bars in FlashAttention-2's figures "
             "(the H200's measurements lack it); elsewhere flash2's time x the A100 figure's rate ratio."]
    return ValidationResult(table=t, cost_model=name if isinstance(name, str) else "custom", notes=notes)
