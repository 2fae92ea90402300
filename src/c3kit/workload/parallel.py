"""Parallelism: how one model is split over GPUs (TP, SP, DP/FSDP, PP, EP) and batched."""

from __future__ import annotations

from dataclasses import dataclass

from c3kit.errors import WorkloadError
from c3kit.workload.config import ModelConfig

RECOMPUTE = ("none", "selective", "full", "op", "layer")
# What each recomputation mode recomputes in a layer's backward (workload/layer.py prices it, memory.py stores the rest).
RECOMPUTE_SOURCES = {
    "none": "nothing: every activation the backward needs is stored.",
    "selective": "the attention core (Korthikanti et al. 2022, Sec. 4.2; Megatron-LM's selective recompute).",
    "full": "the whole layer from its input (Megatron-LM's full recompute; torchtitan's activation_checkpoint "
            "mode 'full': checkpoint_wrapper around each block).",
    "op": "torchtitan's op-level selective AC (activation_checkpoint mode 'selective', selective_ac_option 'op'; "
          "torchtitan/parallelisms/parallelize_llama.py _apply_ac_to_transformer_block at 9dec370 / eaea6f6a): its "
          "policy saves the outputs of the ops in _save_list (aten.mm, flash and memory-efficient SDPA, "
          "reduce_scatter_tensor, abs, max) except every second aten.mm of a block, and recomputes the rest. "
          "In a block's order wq, wk, wv, wo, w1, w3, w2 that recomputes wk, wo and w3 with the norms, RoPE and "
          "SiLU x mul; cuDNN or unfused attention is not on the list and is recomputed; FP8 linears run "
          "torch._scaled_mm, not on the list: every projection but the last (w2, whose output nothing needs) is "
          "recomputed.",
    "layer": "torchtitan's layer-level selective AC (selective_ac_option an integer N, default '2' in "
             "config_manager.py): every N-th block is wrapped in full checkpointing (ptd_checkpoint_wrapper._count "
             "% N == 0), the others recompute nothing; priced per layer as 1 / N of a full recompute "
             "(Parallelism.recompute_every = N).",
}

# How often FSDP (ZeRO-3) gathers a stage's parameters and reduce-scatters its gradients over a step of several
# micro-batches (Parallelism.fsdp_sync).
FSDP_SYNC = ("micro", "step")
# Megatron-Core core_v0.16.0 model_parallel_config.py overlap_moe_expert_parallel_comm ("Overlap EP A2A
# communications with independent computations of different micro-batches in 1f1b phase of pipelining or
# non-pipelining schedule"; moe/README.md "EP A2A Overlap": merges the forward and backward passes of adjacent
# micro-batches); transformer_config.py requires ep > 1, virtual pipeline stages when pp > 1, no full recomputation.
# Megatron-Bridge's performance recipes turn it on with moe_a2a_overlap (scripts/performance/utils/overrides.py
# _set_moe_a2a_overlap_overrides: overlap_moe_expert_parallel_comm and delay_wgrad_compute).
MOE_A2A_OVERLAP_SOURCE = ("Megatron-Core core_v0.16.0 model_parallel_config.py overlap_moe_expert_parallel_comm, "
                          "transformer_config.py checks, moe/README.md EP A2A Overlap")
# Whether the data-parallel gradient reduction runs behind the backward (Parallelism.dp_overlap) or after it.
DP_OVERLAP_SOURCES = {
    True: "overlapped: each bucket's reduction starts as soon as the backward has produced its gradients (Megatron-Core "
          "DistributedDataParallelConfig.overlap_grad_reduce / --overlap-grad-reduce, torch DistributedDataParallel's "
          "autograd-hook buckets, FSDP's reduce-scatters in the post-backward hooks).",
    False: "after the backward: every gradient is reduced only once the step's last backward is done, exposed. "
           "Megatron-LM of 2021-22 (--DDP-impl local, its default: megatron/training.py train_step calls "
           "model.allreduce_gradients() after forward_backward_func returns; --overlap-grad-reduce did not exist yet) "
           "and DeepSpeed's pipeline engine (deepspeed/runtime/pipe/schedule.py TrainSchedule ends every step with "
           "ReduceTiedGrads and ReduceGrads after the last micro-batch's backward; engine.py _exec_reduce_grads).",
}
# Pipeline send / receive overlapped with compute (Parallelism.pp_p2p_overlap): Megatron-Core overlap_p2p_comm.
PP_P2P_OVERLAP_SOURCE = ("Megatron-Core ModelParallelConfig.overlap_p2p_comm (interleaved schedule: the send / receive "
                         "of one model chunk's activations runs asynchronously behind the compute of another chunk, "
                         "waited for only when needed). NeMo 2.0 (nemo/lightning/pytorch/callbacks/"
                         "megatron_comm_overlap.py MegatronCommOverlapCallback) and Megatron-Bridge (src/megatron/"
                         "bridge/training/comm_overlap.py CommOverlapConfig._get_model_comm_overlap_cfgs) set it, with "
                         "batch_p2p_comm off, whenever pp > 1 and vpp > 1.")
# Transformer Engine's userbuffers TP communication overlap (Parallelism.tp_comm_overlap): with sequence parallelism, each
# all-gather / reduce-scatter of a layer runs inside the TE module of the GEMM beside it, by the method TE's config
# names for that GEMM (transformer_engine/pytorch/module/base.py initialize_ub): ring_exchange (the collective cut into
# tp chunked point-to-point steps, each beside a GEMM chunk; copy engines with use_ce, TE's default), pipeline (the
# GEMM split in num_splits chunks, each chunk's reduce-scatter by an SM kernel on num_sm SMs; set_sm_margin confines
# the GEMM to the other SMs) or bulk (a whole collective on num_sm SMs beside an independent GEMM: the input-gradient
# GEMM of a column-parallel layer beside the re-gather of its input, the weight-gradient GEMM beside the
# reduce-scatter of its input gradient). Per TE GEMM name: (method, set_sm_margin); the per-GEMM num_sm, cga_size and
# num_splits of each run's config are recorded in studies/data/tp_overlap.csv.
_TE_AG = {g: ("ring_exchange", False) for g in ("qkv_fprop", "fc1_fprop", "proj_dgrad", "fc2_dgrad")}
_TE_BULK = {g: ("bulk", False) for g in ("qkv_dgrad", "qkv_wgrad", "fc1_dgrad", "fc1_wgrad")}
TP_COMM_OVERLAP_METHODS = {
    "none": {},
    "pipeline": {**_TE_AG, **_TE_BULK, "proj_fprop": ("pipeline", False), "fc2_fprop": ("pipeline", False)},
    "pipeline_margin": {**_TE_AG, **_TE_BULK, "proj_fprop": ("pipeline", True), "fc2_fprop": ("pipeline", True)},
    "ring_exchange": {**_TE_AG, **_TE_BULK, "proj_fprop": ("ring_exchange", True), "fc2_fprop": ("ring_exchange", True)},
}
TP_COMM_OVERLAPS = tuple(TP_COMM_OVERLAP_METHODS)
TP_COMM_OVERLAP_SOURCES = {
    "none": "no userbuffers overlap: the step's overlap mode prices the tensor-parallel pairs (Megatron-LM before "
            "Transformer Engine, frameworks without tp_comm_overlap).",
    "pipeline": "Transformer Engine's initialize_ub defaults when no per-GEMM config is given (v1.8 and v1.9: "
                "ring_exchange for qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad with use_ce True; pipeline for "
                "proj_fprop, fc2_fprop with num_sm 16, num_splits 4, set_sm_margin 0; bulk for qkv_dgrad, qkv_wgrad, "
                "fc1_dgrad, fc1_wgrad with num_sm 16): NeMo's ub_tp_comm_overlap without ub_tp_comm_overlap_cfg.",
    "pipeline_margin": "TE's default methods with set_sm_margin 1 on the pipelined reduce-scatters: the NeMo "
                       "launcher's H100 userbuffers configs (launcher_scripts/conf/training/tp_overlap/"
                       "ub_cfg_h100_*.yaml: proj_fprop and fc2_fprop pipeline, num_sm 16-24, num_splits 4, "
                       "set_sm_margin 1; bulk pairs set_sm_margin 0).",
    "ring_exchange": "TE's default methods except proj_fprop and fc2_fprop by ring_exchange (num_sm 1, set_sm_margin "
                     "True): Megatron-Bridge's FP8 H100 userbuffers configs (src/megatron/bridge/training/"
                     "comm_overlap.py userbuffers_fp8_h100_h8192_tp4_mbs1_seqlen8192, "
                     "userbuffers_fp8_h100_h16384_tp8_cp2_mbs1_seqlen8192).",
}


# How a pipeline stage exchanges activations and gradients with its neighbours (Parallelism.pp_engine). Per micro-batch
# and phase (fwd: activations, bwd: gradients): (transfers in turn, share of the tensor each TP rank sends: "tp" a
# 1/tp slice or "whole", a small meta tensor before each transfer, TP all-gathers of the whole tensor). The step
# prices each transfer, meta send and all-gather exposed, one after the other (workload.layer pipeline_sends).
PP_ENGINES = {
    "megatron": {"fwd": (1, "whole", False, 0), "bwd": (1, "whole", False, 0)},
    "megatron_2021": {"fwd": (1, "tp", False, 1), "bwd": (1, "tp", False, 1)},
    "deepspeed": {"fwd": (2, "tp", True, 1), "bwd": (2, "tp", True, 2)},
    "deepspeed_2020": {"fwd": (2, "tp", True, 1), "bwd": (2, "whole", False, 1)},
}
_DS = "https://github.com/microsoft/DeepSpeed/blob/"
PP_ENGINE_SOURCES = {
    "megatron": "Megatron-LM's 1F1B (megatron/p2p_communication.py): send_forward_recv_backward and "
                "send_backward_recv_forward send and receive at once, one exchange of the whole activation per phase "
                "and micro-batch, the library's default.",
    "megatron_2021": "Megatron-LM of 2021 (Narayanan et al. 2021, arXiv 2104.04473, Sec. 4.1 'scatter/gather "
                     "communication optimization'; NVIDIA/Megatron-LM megatron/p2p_communication.py @ "
                     "46c74b4ca06a7794db1e2615544095535cdf12c2, scatter_gather_tensors_in_pipeline on unless "
                     "--no-scatter-gather-tensors-in-pipeline): without sequence parallelism each TP rank sends a 1/tp "
                     "slice (split_tensor_into_1d_equal_chunks) and the receiver all-gathers the whole tensor over "
                     "TP (gather_split_1d_tensor: torch.empty, then a list all_gather into its chunks); with sequence "
                     "parallelism the activation is already a 1/tp slice and is sent as it is.",
    "deepspeed": _DS + "559c4ce11a6b226f856664071d820a9c97feaf9e/deepspeed/runtime/pipe/engine.py (and schedule.py, "
                 "p2p.py; since 'Big science related changes', #1407, e2fdd254ed, 2021-09-29): TrainSchedule issues "
                 "RecvActivation then SendGrad before a forward and SendActivation then RecvGrad before a backward, "
                 "each a blocking dist.send / dist.recv of its own (p2p.py; a broadcast in a 2-rank group before "
                 "torch 1.8), so a stage's two transfers of a phase run one after the other; with tp > 1 "
                 "(is_pipe_partitioned, is_grad_partitioned) every tensor is a PartitionedTensor over the TP group: "
                 "each rank sends a meta LongTensor then its 1/tp slice, and PartitionedTensor.full() all-gathers the "
                 "whole tensor over TP for the received activation (_exec_forward_pass), the received gradient and the "
                 "stage's own output, freed after the send and rebuilt for autograd (_exec_backward_pass); full() writes "
                 "a zeroed flat buffer, torch's list all_gather copies into it and full() returns a .clone().",
    "deepspeed_2020": _DS + "1ff25748b256f675dd26b626e896529e452f99df/deepspeed/runtime/pipe/engine.py (the pipeline "
                      "engine of #392, 2020-09-09, to 2021-09-28): as 'deepspeed', but is_grad_partitioned False: every "
                      "TP rank sends the whole gradient (no meta, no gather) and _exec_recv_grads all-gathers the "
                      "stage's partitioned output before it; p2p.py sends by dist.broadcast in 2-rank groups.",
}


def _one_of(field: str, name: str, choices) -> str:
    """name itself when it is one of choices, else a WorkloadError naming the field and the choices."""
    if name not in choices:
        raise WorkloadError(f"parallelism: {field} {name!r}: use one of {', '.join(choices)}")
    return name


def check_pp_engine(name: str) -> str:
    """The pipeline engine itself, or a WorkloadError naming the choices."""
    return _one_of("pp_engine", name, PP_ENGINES)


def check_tp_comm_overlap(name: str) -> str:
    """The TP communication overlap itself, or a WorkloadError naming the choices."""
    return _one_of("tp_comm_overlap", name, TP_COMM_OVERLAPS)


FSDP_SYNC_SOURCES = {
    "micro": "every micro-batch: parameters all-gathered before each forward and again before each backward "
             "(resharded after forward), gradients reduce-scattered at the end of each backward (PyTorch FSDP's "
             "defaults: fully_shard reshard_after_forward=True, requires_gradient_sync on every backward).",
    "step": "once per step: parameters all-gathered in the first micro-batch's forward and kept unsharded until the "
            "last micro-batch's backward (no backward all-gather), gradients accumulated unsharded and "
            "reduce-scattered once after the last backward. torchtitan with pipeline parallelism: "
            "torchtitan/parallelisms/parallelize_llama.py apply_fsdp (Dec 2024, 9dec370) passes "
            "reshard_after_forward=False to every block's and the root's fully_shard when pp is enabled ('to avoid "
            "per-microbatch all-gathers'); torch.distributed.pipelining stage.py "
            "_PipelineStageBase.backward_maybe_with_nosync sets set_reshard_after_backward(False) and "
            "set_requires_gradient_sync(False) on every backward and runs FSDP's post_backward (the reduce-scatter) "
            "for the whole stage only after the last micro-batch's backward (its run_post_backward; "
            "perform_reduce_grad in torch 2.13). FSDP2 accumulates the unsharded gradients in the reduce dtype "
            "between (torch/distributed/fsdp/_fully_shard/_fsdp_param.py FSDPParam.to_accumulated_grad_if_needed, "
            "accumulate_unsharded_grad_if_needed).",
}

# How context parallelism runs its attention over the cp ranks (Parallelism.cp_impl).
CP_IMPLS = ("ring", "torch")
CP_IMPL_SOURCES = {
    "ring": "a ring of KV chunks beside the attention, no extra memory-bound work priced (the layer description's "
            "default; Megatron-Core / Transformer Engine's p2p ring).",
    "torch": "torch.distributed.tensor.experimental context_parallel as torchtitan runs it (torch 1963fc8 with "
             "torchtitan 9dec370, Dec 2024): K and V reach the attention after torchtitan's repeat_kv (models/llama/"
             "model.py: full query heads, GQA expanded), are all-gathered once per attention call (rotate method "
             "'allgather', torch's default then) and in backward all-gathered again while dK, dV travel the ring in "
             "fp32 after every step, the last pass waited for after the loop; each ring step's partial output is "
             "merged in fp32 and the backward accumulates dQ, dK, dV in fp32 (every kernel: workload.cp_torch, "
             "from its TORCH_CP_CODE), priced on the busiest cp rank, the last, whose every step merges its whole "
             "local output (load balancing evens the attention FLOPs, not the merges).",
}


def check_cp_impl(name: str) -> str:
    """The context-parallel implementation itself, or a WorkloadError naming the choices."""
    return _one_of("cp_impl", name, CP_IMPLS)


# How a framework splits the decoder layers over the pp x vpp virtual pipeline stages (stage_layer_counts).
PP_SPLITS = ("even", "torchtitan", "embedding_loss", "llama3")
PP_SPLIT_SOURCES = {
    "even": "Megatron-Core default (megatron/core/transformer/transformer_block.py get_num_layers_to_build): "
            "layers / (pp x vpp) per virtual stage; with interleaving the layers must divide by pp x vpp. Without "
            "interleaving a remainder goes one layer each to the middle stages (the slowest stage holds "
            "ceil(layers / pp)).",
    "torchtitan": "torchtitan generate_split_points (torchtitan/parallelisms/pipelining_utils.py, Dec 2024, the "
                  "default when no pipeline_parallel_split_points are given): pp stages for single-stage schedules "
                  "(1F1B), 2 x pp for multi-stage ones (Interleaved 1F1B); base = layers // stages, the first stage "
                  "gets base, the middle stages base + 1 while the remainder lasts, the last stage the rest; "
                  "stage s runs on rank s mod pp (loop style).",
    "embedding_loss": "Megatron-Core account_for_embedding_in_pipeline_split and account_for_loss_in_pipeline_split "
                      "(set by Megatron-Bridge's llama31_405b_pretrain_config): the embedding and the loss each count "
                      "as one layer, (layers + 2) / (pp x vpp) slots per virtual stage; the first virtual stage holds "
                      "one decoder layer fewer (the embedding), the last one fewer (the loss).",
    "llama3": "Dubey et al. 2024 (The Llama 3 Herd of Models), Sec. 3.3.2, pipeline parallelism improvements: one "
              "Transformer layer fewer on the first and on the last pipeline stage, so that the first model chunk of "
              "the first stage holds only the embedding and the last chunk of the last stage only the output "
              "projection and loss: (layers + 2) / (pp x vpp) slots per virtual stage as embedding_loss, a chunk "
              "of the embedding or the loss alone allowed.",
}


def stage_layer_counts(layers: int, pp: int, vpp: int = 1, split: str = "even") -> tuple[int, ...]:
    """Decoder layers of each of the pp x vpp virtual pipeline stages, in model order (rule: PP_SPLIT_SOURCES).

    Virtual stage s runs on pipeline rank s mod pp. Raises WorkloadError where the framework would refuse.
    """
    if split not in PP_SPLITS:
        raise WorkloadError(f"parallelism: pp_split {split!r}: use one of {', '.join(PP_SPLITS)}")
    n = pp * vpp
    if split in ("embedding_loss", "llama3"):
        if (layers + 2) % n:
            raise WorkloadError(f"pp_split {split}: {layers} layers + embedding + loss = {layers + 2} are not "
                                f"divisible by pp {pp} x vpp {vpp}: use pp x vpp in {_divisors(layers + 2)}")
        k = (layers + 2) // n
        if k < (2 if split == "embedding_loss" else 1) and n > 1:
            raise WorkloadError(f"pp_split {split}: {n} virtual stages of {k} slot(s) leave the first or last "
                                "stage without a layer: use fewer stages")
        if split == "llama3" and n > 1 and pp > 1 and (layers + 2) // pp < 2:
            raise WorkloadError(f"pp_split llama3: {layers} layers on pp {pp} leave the first or last rank without a "
                                "layer: use fewer stages")
        counts = [k] * n
        if n == 1:
            return (layers,)
        counts[0] -= 1
        counts[-1] -= 1
        return tuple(counts)
    if n > layers:
        raise WorkloadError(f"{layers} layers cannot fill pp {pp} x vpp {vpp} = {n} pipeline stages: use fewer stages")
    base, extra = divmod(layers, n)
    if split == "even":
        if extra and vpp > 1:
            raise WorkloadError(f"{layers} layers are not divisible by pp {pp} x vpp {vpp}: use pp x vpp in "
                                f"{_divisors(layers)}, or pp_split torchtitan / embedding_loss for an uneven split")
        if not extra:
            return (base,) * n
    # torchtitan (and even without interleaving): first stage base, middle stages base + 1 while the
    # remainder lasts, the last stage the rest
    counts = [base]
    for _ in range(n - 2):
        take = 1 if extra > 0 else 0
        extra -= take
        counts.append(base + take)
    if n > 1:
        counts.append(layers - sum(counts))
    return tuple(counts)


def rank_layer_counts(layers: int, pp: int, vpp: int = 1, split: str = "even") -> tuple[int, ...]:
    """Decoder layers each pipeline rank holds (its vpp virtual stages together)."""
    counts = stage_layer_counts(layers, pp, vpp, split)
    return tuple(sum(counts[r::pp]) for r in range(pp))


def _divisors(n: int, limit: int = 64) -> str:
    """Divisors of n up to limit, for "use one of" hints."""
    return ", ".join(str(d) for d in range(1, min(n, limit) + 1) if n % d == 0)


@dataclass(frozen=True)
class Parallelism:
    """A parallel layout. GPUs = tp * cp * pp * dp; rank order is tp fastest, then cp, dp, pp (Megatron).

    ep (expert parallelism) folds into the tp x dp ranks of a pipeline stage (MoE parallel folding):
    ep must divide tp * dp; with ep == 1 experts are tensor-sharded like a dense MLP, with ep > 1
    each rank holds n_experts / ep whole experts. global_batch = 0 means micro_batch * dp (no
    gradient accumulation). vpp is the number of virtual pipeline stages (interleaved 1F1B) per GPU.

    cp (context parallelism, ring attention): each GPU holds seq / cp tokens of every sequence as two
    load-balanced causal chunks; KV chunks circulate around the cp ranks. Weights are replicated over
    cp, so gradients are reduced (and ZeRO state sharded) over dp x cp ranks.
    zero2 (ZeRO-2): gradients and optimizer state sharded over the data-parallel ranks (gradients
    reduce-scattered, parameters all-gathered after the step, like dist_optimizer; gradient memory / dp).
    moe_capacity: expert capacity factor (0 = dropless): an expert takes at most capacity x its
    balanced share of tokens, the rest are dropped. moe_imbalance (>= 1): the busiest expert's tokens
    over the balanced share (routing is never perfectly even; the slowest rank sets the step). Expert
    GEMMs are sized for the busiest expert: balanced share x min(imbalance, capacity).
    pp_split: how the framework splits the layers over the pp x vpp virtual stages (PP_SPLITS,
    stage_layer_counts): "even" (Megatron-Core's default; without interleaving a remainder goes to the
    middle stages), "torchtitan" (its default split points), "embedding_loss" (Megatron-Core's
    account_for_embedding / account_for_loss options) or "llama3" (the Llama 3 paper's, where a chunk may
    hold the embedding or the loss alone). A step is priced on the rank holding the most
    layers (rank_layer_counts); the pipeline bubble sums the other ranks' shares (step/plan.py).
    fsdp_sync (FSDP_SYNC, with fsdp): "micro" (default) gathers parameters and reduce-scatters gradients every
    micro-batch; "step" gathers once per step, keeps the stage's parameters unsharded across its micro-batches
    and reduce-scatters the accumulated gradients once after the last backward (torchtitan with pipeline
    parallelism, FSDP_SYNC_SOURCES). Without fsdp it is "micro" (nothing is sharded).
    moe_a2a_overlap (ep > 1): the expert-parallel all-to-alls of one micro-batch run behind the compute of
    another (Megatron-Core overlap_moe_expert_parallel_comm, MOE_A2A_OVERLAP_SOURCE; step/plan.py).
    cp_impl (CP_IMPLS, with cp > 1): "ring" (default) prices the KV exchange beside the attention; "torch" adds
    torch context parallelism's fp32 merges and copies (op cp_merge) and its all-gathered, GQA-expanded KV
    (CP_IMPL_SOURCES).
    dp_overlap: the data-parallel gradient reduction runs behind the backward (True, default) or after it, exposed
    (False: Megatron-LM of 2021-22, DeepSpeed's pipeline engine; DP_OVERLAP_SOURCES; not with fsdp, whose
    reduce-scatters run in its post-backward hooks). pp_p2p_overlap: pipeline sends and receives run behind compute
    (Megatron-Core overlap_p2p_comm, PP_P2P_OVERLAP_SOURCE; step/plan.py prices them hidden) instead of exposed;
    a no-op without pp > 1.
    tp_comm_overlap (TP_COMM_OVERLAPS, with tp > 1 and sp): Transformer Engine's userbuffers overlap of the sequence-
    parallel all-gathers and reduce-scatters with the GEMMs beside them, by the per-GEMM methods of
    TP_COMM_OVERLAP_METHODS (TP_COMM_OVERLAP_SOURCES; step/tpcomm.py prices them); "none" (default) leaves the TP pairs
    to the step's overlap mode; a no-op without tp > 1.
    pp_engine (PP_ENGINES): how pipeline stages exchange activations and gradients: "megatron" (default, Megatron-LM's
    1F1B), "megatron_2021" (the same with 2021-22 Megatron-LM's scatter/gather of 1/tp slices without sequence
    parallelism) or DeepSpeed's pipeline engine ("deepspeed", "deepspeed_2020": serial blocking transfers of 1/tp slices
    with meta sends and TP all-gathers, PP_ENGINE_SOURCES); DeepSpeed's engine needs vpp 1 and no p2p overlap.
    """

    tp: int = 1
    sp: bool = False
    dp: int = 1
    fsdp: bool = False  # ZeRO-3: weights, gradients and optimizer state sharded over dp
    pp: int = 1
    ep: int = 1
    micro_batch: int = 1
    global_batch: int = 0
    recompute: str = "none"  # RECOMPUTE (what each recomputes: RECOMPUTE_SOURCES)
    vpp: int = 1
    dist_optimizer: bool = False  # ZeRO-1 (Megatron distributed optimizer): optimizer state sharded over dp
    cp: int = 1  # context parallelism (ring attention over cp ranks)
    zero2: bool = False  # ZeRO-2: gradients and optimizer state sharded over dp
    moe_capacity: float = 0.0  # expert capacity factor; 0 = dropless
    moe_imbalance: float = 1.0  # busiest expert's tokens / the balanced share
    pp_split: str = "even"  # how layers split over virtual pipeline stages (PP_SPLITS)
    fsdp_sync: str = "micro"  # FSDP gathers / reduce-scatters every micro-batch or once per step (FSDP_SYNC)
    recompute_every: int = 2  # recompute "layer": every N-th layer fully recomputed (torchtitan's default '2')
    moe_a2a_overlap: bool = False  # EP all-to-alls hidden behind another micro-batch's compute (MOE_A2A_OVERLAP_SOURCE)
    cp_impl: str = "ring"  # how context parallelism runs (CP_IMPLS; "torch": torchtitan's, with fp32 merges)
    dp_overlap: bool = True  # DP gradient reduction behind the backward; False: after it (DP_OVERLAP_SOURCES)
    pp_p2p_overlap: bool = False  # pipeline send / receive behind compute (PP_P2P_OVERLAP_SOURCE)
    tp_comm_overlap: str = "none"  # Transformer Engine userbuffers TP overlap (TP_COMM_OVERLAPS, TP_COMM_OVERLAP_SOURCES)
    pp_engine: str = "megatron"  # how pipeline stages exchange tensors (PP_ENGINES, PP_ENGINE_SOURCES)

    def __post_init__(self) -> None:
        for key in ("tp", "dp", "pp", "ep", "micro_batch", "vpp", "cp", "recompute_every"):
            v = getattr(self, key)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise WorkloadError(f"parallelism: {key} must be a positive integer, got {v!r}")
        if not isinstance(self.global_batch, int) or self.global_batch < 0:
            raise WorkloadError(f"parallelism: global_batch must be a positive integer, got {self.global_batch!r}")
        if self.global_batch == 0:
            object.__setattr__(self, "global_batch", self.micro_batch * self.dp)
        if self.recompute not in RECOMPUTE:
            raise WorkloadError(f"parallelism: recompute {self.recompute!r}: use one of {', '.join(RECOMPUTE)}")
        if self.sp and self.tp == 1:
            object.__setattr__(self, "sp", False)  # sequence parallelism is a no-op without TP
        if self.global_batch % (self.micro_batch * self.dp):
            raise WorkloadError(f"parallelism: global batch {self.global_batch} is not divisible by micro batch "
                                f"{self.micro_batch} x dp {self.dp} = {self.micro_batch * self.dp}")
        if self.vpp > 1 and self.pp == 1:
            raise WorkloadError("parallelism: virtual pipeline stages (vpp > 1) need pp > 1")
        for key, lo in (("moe_capacity", 0.0), ("moe_imbalance", 1.0)):
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (lo <= v < float("inf")):
                raise WorkloadError(f"parallelism: {key} must be a number >= {lo:g}, got {v!r}")
        if self.pp_split not in PP_SPLITS:
            raise WorkloadError(f"parallelism: pp_split {self.pp_split!r}: use one of {', '.join(PP_SPLITS)}")
        if self.fsdp_sync not in FSDP_SYNC:
            raise WorkloadError(f"parallelism: fsdp_sync {self.fsdp_sync!r}: use one of {', '.join(FSDP_SYNC)}")
        check_cp_impl(self.cp_impl)
        for key in ("dp_overlap", "pp_p2p_overlap"):
            if not isinstance(getattr(self, key), bool):
                raise WorkloadError(f"parallelism: {key} must be True or False, got {getattr(self, key)!r}")
        if self.fsdp and not self.dp_overlap:
            raise WorkloadError("parallelism: dp_overlap False (gradients reduced after the backward) does not apply to "
                                "FSDP, whose reduce-scatters run in its post-backward hooks: use dp_overlap True")
        if self.pp == 1:
            object.__setattr__(self, "pp_p2p_overlap", False)  # no pipeline: nothing to send
        check_tp_comm_overlap(self.tp_comm_overlap)
        check_pp_engine(self.pp_engine)
        if self.pp_engine.startswith("deepspeed") and self.sp and self.tp > 1:
            raise WorkloadError(f"parallelism: pp_engine {self.pp_engine!r} (DeepSpeed's pipeline engine of 2020-21) "
                                "partitions whole activations over TP and predates sequence parallelism: use sp False")
        if self.pp_engine.startswith("deepspeed") and (self.vpp > 1 or self.pp_p2p_overlap):
            raise WorkloadError(f"parallelism: pp_engine {self.pp_engine!r} (DeepSpeed's pipeline engine) has no "
                                "interleaved stages and no overlapped sends: use vpp 1 and pp_p2p_overlap False")
        if self.tp == 1:
            object.__setattr__(self, "tp_comm_overlap", "none")  # no tensor parallelism: nothing to overlap
        elif self.tp_comm_overlap != "none" and not self.sp:
            # NeMo and Megatron-Bridge turn it off without SP (CommOverlapConfig._get_model_comm_overlap_cfgs):
            # the userbuffers methods overlap SP's all-gathers and reduce-scatters
            raise WorkloadError(f"parallelism: tp_comm_overlap {self.tp_comm_overlap!r} needs sequence parallelism "
                                "(sp): Transformer Engine's userbuffers overlap its all-gathers and reduce-scatters")
        if not self.fsdp:
            object.__setattr__(self, "fsdp_sync", "micro")  # nothing sharded: nothing to gather or reduce-scatter
        if self.moe_a2a_overlap and (self.ep == 1 or (self.pp > 1 and self.vpp == 1) or self.recompute == "full"):
            raise WorkloadError("parallelism: moe_a2a_overlap (Megatron-Core overlap_moe_expert_parallel_comm) needs "
                                "ep > 1, virtual pipeline stages (vpp > 1) when pp > 1, and no full recomputation")
        if 0 < self.moe_capacity < 1:
            raise WorkloadError(f"parallelism: moe_capacity {self.moe_capacity} drops tokens of a balanced routing: "
                                "use 0 (dropless) or a factor >= 1")

    @property
    def gpus(self) -> int:
        """GPUs used: tp * cp * pp * dp."""
        return self.tp * self.cp * self.pp * self.dp

    @property
    def grad_accum(self) -> int:
        """Micro-batches per step per data-parallel rank: global_batch / (micro_batch * dp)."""
        return self.global_batch // (self.micro_batch * self.dp)

    def rank_layers(self, layers: int) -> tuple[int, ...]:
        """Decoder layers on each pipeline rank for a model of `layers` layers (this layout's pp_split)."""
        return rank_layer_counts(layers, self.pp, self.vpp, self.pp_split)

    def to_dict(self) -> dict:
        """Plain JSON-ready fields plus gpus and grad_accum."""
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["gpus"], d["grad_accum"] = self.gpus, self.grad_accum
        return d

    def validate(self, model: ModelConfig, gpus: int | None = None) -> "Parallelism":
        """Check that this layout divides the model (and the GPU count when given); returns self."""
        m = model
        if gpus is not None and gpus != self.gpus:
            raise WorkloadError(f"{gpus} GPUs != tp {self.tp}" + (f" x cp {self.cp}" if self.cp > 1 else "")
                                + f" x pp {self.pp} x dp {self.dp} = {self.gpus}: change --gpus or the parallel sizes")
        if m.heads % self.tp:
            raise WorkloadError(f"{m.name}: {m.heads} attention heads are not divisible by tp {self.tp}: "
                                f"use tp in {_divisors(m.heads)}")
        if m.kv_heads % self.tp and self.tp % m.kv_heads:
            raise WorkloadError(f"{m.name}: {m.kv_heads} KV heads and tp {self.tp}: one must divide the other")
        ffn = m.moe_ffn_hidden if m.is_moe and self.ep == 1 else m.ffn_hidden
        if ffn % self.tp:
            raise WorkloadError(f"{m.name}: FFN width {ffn} is not divisible by tp {self.tp}: use a smaller tp")
        if m.layers < self.pp:
            raise WorkloadError(f"{m.name}: {m.layers} layers cannot fill pp {self.pp} stages: use pp <= {m.layers}")
        try:
            self.rank_layers(m.layers)
        except WorkloadError as e:
            raise WorkloadError(f"{m.name}: {e}") from None
        if self.cp > 1 and self.ep > 1:
            raise WorkloadError("context parallelism with expert parallelism is not modelled yet: use cp 1 or ep 1")
        if self.ep > 1:
            if not m.is_moe:
                raise WorkloadError(f"{m.name} is dense: expert parallelism ep {self.ep} needs a MoE model (use ep 1)")
            if m.n_experts % self.ep:
                raise WorkloadError(f"{m.name}: {m.n_experts} experts are not divisible by ep {self.ep}")
            if (self.tp * self.dp) % self.ep:
                raise WorkloadError(f"ep {self.ep} must divide tp {self.tp} x dp {self.dp} = {self.tp * self.dp}")
        if self.pp > 1 and self.vpp > 1 and self.grad_accum % self.pp:
            raise WorkloadError(f"interleaved pipeline: {self.grad_accum} micro-batches per step are not "
                                f"divisible by pp {self.pp}")
        return self
