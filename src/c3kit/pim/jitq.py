"""JIT-Q: keep only high-precision weights and let PIM make the MX copies just before each use.

Ledger: bytes per parameter of a training job with and without JIT-Q. Throughput: per layer the GPU
computes layer l while PIM quantises layer l+1 (forward: row-wise copy; backward: column-wise copy of
layer l-1). All-bank PIM commands lock the GPU out of memory while they run, so a layer takes
max(GPU compute, GPU memory time + PIM quantise time of the next layer); the first layer of each pass
cannot be hidden. The baseline instead quantises every weight on the GPU once per step.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from c3kit.errors import PimError
from c3kit.pim.model import PimMemory
from c3kit.pim.mx import FORMATS, MXFormat, get_format

PUBLISHED = {"max_capacity_saved": 0.24, "max_throughput_loss": 0.024}

OPTIMIZERS = {"adam": 8.0, "adam-bf16": 4.0, "sgd-momentum": 4.0, "sgd": 0.0}  # state bytes per parameter
GRADIENTS = {"fp32": 4.0, "bf16": 2.0}
MASTER_BYTES = 4.0  # FP32 master weights
ACT_BYTES_PER_TOKEN_HIDDEN = {"full": 2.0, "selective": 34.0}  # per layer, BF16 (recompute policies)


@dataclass(frozen=True)
class Ledger:
    """Training memory in bytes for one configuration, with and without JIT-Q."""

    fmt: str
    optimizer: str
    gradients: str
    recompute: str
    master: float
    grads: float
    optimizer_state: float
    copies: float  # two directional MX copies (baseline)
    jit_buffer: float  # JIT-Q: copies of the layer in use and the next one only
    activations: float

    @property
    def baseline(self) -> float:
        """Bytes without JIT-Q."""
        return self.master + self.grads + self.optimizer_state + self.copies + self.activations

    @property
    def jitq(self) -> float:
        """Bytes with JIT-Q."""
        return self.master + self.grads + self.optimizer_state + self.jit_buffer + self.activations

    @property
    def saved(self) -> float:
        """Fraction of the baseline capacity JIT-Q frees."""
        return 1.0 - self.jitq / self.baseline


def ledger(params_per_layer: float, layers: int, hidden: int, tokens: int, fmt: MXFormat | str = "mx9",
           optimizer: str = "adam", gradients: str = "fp32", recompute: str = "full",
           other_params: float = 0.0) -> Ledger:
    """Memory ledger of a data-parallel replica: weights, grads, optimizer, MX copies, activations."""
    fmt = get_format(fmt) if isinstance(fmt, str) else fmt
    for what, val, table in (("optimizer", optimizer, OPTIMIZERS), ("gradients", gradients, GRADIENTS),
                             ("recompute", recompute, ACT_BYTES_PER_TOKEN_HIDDEN)):
        if val not in table:
            raise PimError(f"unknown {what} {val!r}: use one of {', '.join(table)}")
    if params_per_layer <= 0 or layers <= 0 or hidden <= 0 or tokens <= 0:
        raise PimError("parameters per layer, layers, hidden size and tokens must be positive")
    p = params_per_layer * layers + other_params
    return Ledger(fmt.name, optimizer, gradients, recompute, master=p * MASTER_BYTES, grads=p * GRADIENTS[gradients],
                  optimizer_state=p * OPTIMIZERS[optimizer], copies=2 * p * fmt.bytes_per_element,
                  jit_buffer=2 * params_per_layer * fmt.bytes_per_element,
                  activations=tokens * hidden * layers * ACT_BYTES_PER_TOKEN_HIDDEN[recompute])


@dataclass(frozen=True)
class TrainSetup:
    """GPU side of a training step (SI units) and the PIM that sits in its memory."""

    gpu_flops: float  # FLOP/s the layer GEMMs reach (peak x efficiency)
    gpu_bw: float  # B/s HBM bandwidth of the GPU
    pim_boost: float  # PIM all-bank bandwidth over gpu_bw
    pim_row_efficiency: float
    cmds_per_word: float = 4.0  # PIM commands to quantise one word: max exponent, scale, round, pack
    act_traffic: float = 34.0  # activation bytes moved per token per hidden element per layer (fwd)

    def __post_init__(self) -> None:
        if min(self.gpu_flops, self.gpu_bw, self.pim_boost, self.pim_row_efficiency, self.cmds_per_word) <= 0:
            raise PimError("GPU FLOP/s, bandwidth, PIM boost, row efficiency and commands per word must be positive")


def setup_from(gpu_flops: float, gpu_bw: float, mem: PimMemory, cmds_per_word: float = 4.0) -> TrainSetup:
    """A TrainSetup whose PIM has the boost and row efficiency of `mem`."""
    return TrainSetup(gpu_flops, gpu_bw, mem.bandwidth_boost, mem.row_efficiency, cmds_per_word)


def pim_quantize_time(params: float, fmt: MXFormat, s: TrainSetup) -> float:
    """Seconds PIM needs to read FP32 weights and write one MX copy of them."""
    pim_bw = s.gpu_bw * s.pim_boost * s.pim_row_efficiency
    return params * (MASTER_BYTES * s.cmds_per_word + fmt.bytes_per_element) / pim_bw


def throughput(params_per_layer: float, layers: int, hidden: int, tokens: int, seq: int, fmt: MXFormat | str,
               s: TrainSetup, accum: int = 8) -> dict:
    """Micro-batch time of the baseline and of JIT-Q, the throughput loss and whether PIM keeps up.

    The baseline re-quantises its stored copies once per optimizer step, i.e. once every `accum`
    micro-batches; JIT-Q quantises in every forward and backward pass.
    """
    if accum <= 0:
        raise PimError(f"gradient accumulation {accum}: must be at least 1 micro-batch per step")
    fmt = get_format(fmt) if isinstance(fmt, str) else fmt
    if tokens <= 0 or seq <= 0:
        raise PimError("tokens per step and sequence length must be positive")
    fwd_flops = 2 * params_per_layer * tokens + 4 * tokens * seq * hidden
    fwd_compute = fwd_flops / s.gpu_flops
    fwd_mem = (params_per_layer * fmt.bytes_per_element + s.act_traffic * tokens * hidden) / s.gpu_bw
    bwd_compute, bwd_mem = 2 * fwd_compute, 2 * fwd_mem
    tq = pim_quantize_time(params_per_layer, fmt, s)
    fwd_base, bwd_base = max(fwd_compute, fwd_mem), max(bwd_compute, bwd_mem)
    gpu_quant = layers * params_per_layer * (MASTER_BYTES + 2 * fmt.bytes_per_element) / s.gpu_bw
    base = layers * (fwd_base + bwd_base) + gpu_quant / accum
    fwd_j = max(fwd_compute, fwd_mem + tq)
    bwd_j = max(bwd_compute, bwd_mem + tq)
    # The first layer of each pass has nothing to hide behind; the last has no next layer to quantise.
    jit = 2 * tq + (layers - 1) * (fwd_j + bwd_j) + fwd_base + bwd_base
    no_quant = layers * (fwd_base + bwd_base)
    return {"format": fmt.name, "tokens": tokens, "fwd_compute": fwd_compute, "fwd_mem": fwd_mem,
            "pim_quantize": tq, "keeps_up": bool(fwd_mem + tq <= fwd_compute and bwd_mem + tq <= bwd_compute),
            "baseline_time": base, "jitq_time": jit, "throughput_loss": jit / base - 1.0,
            "loss_vs_free_copies": jit / no_quant - 1.0}


def formats() -> list[MXFormat]:
    """MX9, MX6 and MX4."""
    return list(FORMATS.values())


def ledger_table(params_per_layer: float, layers: int, hidden: int, tokens: int, other_params: float = 0.0,
                 fmts=None, optimizers=None, grads=None, recomputes=None) -> pd.DataFrame:
    """Ledger rows over formats x optimizers x gradient dtypes x recompute policies."""
    rows = []
    for f in fmts or [f.name for f in formats()]:
        for o in optimizers or list(OPTIMIZERS):
            for gr in grads or list(GRADIENTS):
                for r in recomputes or list(ACT_BYTES_PER_TOKEN_HIDDEN):
                    lg = ledger(params_per_layer, layers, hidden, tokens, f, o, gr, r, other_params)
                    rows.append({"format": lg.fmt, "optimizer": o, "gradients": gr, "recompute": r,
                                 "master": lg.master, "grads": lg.grads, "optimizer_state": lg.optimizer_state,
                                 "copies": lg.copies, "jit_buffer": lg.jit_buffer, "activations": lg.activations,
                                 "baseline_bytes": lg.baseline, "jitq_bytes": lg.jitq, "saved": lg.saved})
    return pd.DataFrame(rows)


def throughput_table(params_per_layer: float, layers: int, hidden: int, seq: int, s: TrainSetup,
                     token_counts=(256, 512, 1024, 2048, 4096, 8192), fmts=None, accum: int = 8) -> pd.DataFrame:
    """Throughput rows over formats x tokens per micro-batch."""
    return pd.DataFrame([throughput(params_per_layer, layers, hidden, t, seq, f, s, accum)
                         for f in fmts or [f.name for f in formats()] for t in token_counts])


def summary(ledgers: pd.DataFrame, thr: pd.DataFrame) -> pd.DataFrame:
    """Our best capacity saving and loss (vs a baseline whose copies cost nothing) beside JIT-Q's."""
    kept = thr[thr.keeps_up]
    rows = [("max_capacity_saved", float(ledgers.saved.max()), PUBLISHED["max_capacity_saved"]),
            ("max_throughput_loss", float(kept.loss_vs_free_copies.max()) if len(kept) else float("nan"),
             PUBLISHED["max_throughput_loss"])]
    if (~thr.keeps_up).any():
        rows.append(("loss_when_pim_falls_behind", float(thr[~thr.keeps_up].loss_vs_free_copies.max()), float("nan")))
    return pd.DataFrame([{"metric": k, "ours": o, "published": p, "gap": o - p} for k, o, p in rows])
