"""Serving-engine terms of an iteration beyond its GPU kernels: CUDA graph capture sizes and padding, the
host's kernel dispatch of eager iterations, and the engine's host time per iteration.

Each term is named, carries its source (SOURCES) and is shown as its own part of an IterationPrice
(pricing.py): `graph_pad` (the padded rows a captured decode batch computes), `eager_wait` (GPU idle
while the host launches an eager iteration's kernels) and `host` (scheduler, input preparation and
the sampled tokens' sync, outside the GPU's work). Their parameters come from the engines' source
code and published profiles of their host loop, and from our own H200 op-level launch measurements;
none is taken from an end-to-end serving result.

Engines (ENGINES): "none" prices the kernels alone (c3kit serve's default, and the TensorRT-LLM rows:
its C++ executor's host time is not modelled); "loop" is a bare PyTorch loop (decode replays a CUDA
graph of its exact batch, prefill runs eagerly); "loop-eager" the same with every iteration eager;
"vllm-v0" is vLLM's V0 engine as of v0.6.x (Oct 2024).
"""

from __future__ import annotations

from dataclasses import dataclass

from c3kit.step.overheads import eager_launch_s  # noqa: F401 - one measured launch for serving and training
from c3kit.errors import C3kitError

V0_CAPTURE_SIZES = (1, 2, 4) + tuple(8 * i for i in range(1, 33))
V0_HOST_GAP_S = 5.5e-3  # between two decode steps at V0_HOST_GAP_SEQS sequences (SOURCES["host"])
V0_HOST_GAP_SEQS = 256

SOURCES = {
    "capture_sizes": "vLLM V0 (v0.5-v0.6) vllm/worker/model_runner.py: _BATCH_SIZES_TO_CAPTURE = [1, 2, 4] + "
                     "[8 i for i in 1..32]; a decode-only batch replays the graph of the next captured size "
                     "(_get_graph_batch_size; the padded rows are computed and discarded); larger decode batches "
                     "and every batch with a prompt run eagerly.",
    "eager_dispatch": "An eager iteration cannot end before the host has launched its kernels: kernels x the "
                      "marginal eager launch of a PyTorch op measured on the lent H200's host "
                      "(the op-level floor family: tiny_add launched eagerly 1, 10 and 100 times; "
                      "cost.opclass.fit_floor); kernels: one per node run of the step graph. A lower bound for "
                      "an engine's Python layers. Other GPUs' hosts: not yet measured (the H200 host's figure).",
    "host": "vLLM V0 host time per iteration outside the GPU's work (scheduler, input preparation, sampler "
            "metadata, the sampled tokens' device-to-host sync), with the async output processor on (v0.6.0+): "
            "5-6 ms between two decode steps at 256 sequences (Llama-2-7B, ShareGPT; vLLM issue #10634, "
            "2024-11-25), taken as 5.5 ms / 256 per scheduled sequence (that work loops over the sequences; a "
            "fixed part is not published and is left at 0). Before async output processing the gap was about "
            "4 ms per decode step (vLLM RFC #6854, 2024-07) plus output processing of 0.2 ms at batch 1 and "
            "3.4 ms at batch 32 (vLLM RFC #6913).",
}


@dataclass(frozen=True)
class EngineOverheads:
    """How an engine runs an iteration: CUDA graphs for decode, eager dispatch floor, host time per iteration."""

    name: str = "none"
    decode_graphs: bool = False  # decode-only iterations replay CUDA graphs
    capture_sizes: tuple[int, ...] = ()  # with decode_graphs: captured batch sizes (empty: every size, no padding)
    eager_dispatch: bool = False  # eager iterations wait for the host to launch their kernels
    host_per_seq_s: float = 0.0  # host seconds per scheduled sequence per iteration
    host_fixed_s: float = 0.0  # host seconds per iteration
    note: str = ""
    # how the engine's model code runs the gated MLP's activation (workload.layer.GLUE): serving engines run a fused
    # kernel on the gate+up GEMM output (vLLM's SiluAndMul custom op, TensorRT-LLM's gated-activation plugin);
    # a bare PyTorch loop splits it into strided views ("split": the measured swiglu_chunked kernel)
    glue: str = "fused"

    def __post_init__(self) -> None:
        if not (self.host_per_seq_s >= 0 and self.host_fixed_s >= 0):
            raise C3kitError(f"engine {self.name}: host times must be >= 0")
        if any(int(s) < 1 for s in self.capture_sizes) or list(self.capture_sizes) != sorted(self.capture_sizes):
            raise C3kitError(f"engine {self.name}: capture sizes must be ascending whole numbers >= 1")

    @property
    def active(self) -> bool:
        """True when any term can add time to an iteration."""
        return self.decode_graphs or self.eager_dispatch or self.host_per_seq_s > 0 or self.host_fixed_s > 0

    def graph_batch(self, prefills: int, decode: int) -> int | None:
        """The captured batch an iteration replays (None: it runs eagerly)."""
        if not self.decode_graphs or prefills or decode < 1:
            return None
        if not self.capture_sizes:
            return decode
        for s in self.capture_sizes:
            if s >= decode:
                return s
        return None

    def host_time(self, sequences: int) -> float:
        """Host seconds of an iteration scheduling `sequences` sequences."""
        return self.host_fixed_s + self.host_per_seq_s * sequences


ENGINES = {
    "none": EngineOverheads("none", note="GPU kernels alone"),
    "loop": EngineOverheads("loop", decode_graphs=True, eager_dispatch=True, glue="split",
                            note="a bare PyTorch loop: decode replays a CUDA graph of its batch, prefill eager"),
    "loop-eager": EngineOverheads("loop-eager", eager_dispatch=True, glue="split",
                                  note="a bare PyTorch loop, every iteration eager"),
    "vllm-v0": EngineOverheads("vllm-v0", decode_graphs=True, capture_sizes=V0_CAPTURE_SIZES, eager_dispatch=True,
                               host_per_seq_s=V0_HOST_GAP_S / V0_HOST_GAP_SEQS,
                               note="vLLM V0 engine, v0.6.x (Oct 2024), async output processing on"),
}


def get_engine(engine) -> EngineOverheads:
    """An EngineOverheads from a name in ENGINES (or the object itself; None: "none")."""
    if engine is None:
        return ENGINES["none"]
    if isinstance(engine, EngineOverheads):
        return engine
    e = ENGINES.get(str(engine))
    if e is None:
        raise C3kitError(f"unknown engine {engine!r}: use one of {', '.join(ENGINES)}")
    return e
