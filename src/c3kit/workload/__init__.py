"""Workload layer: model configs, parallelism, the operator graph of a step, and per-GPU memory."""

from c3kit.workload.graph import Node, StepGraph, build_step
from c3kit.workload.memory import MemoryReport, check_fits, memory_report
from c3kit.workload.model import ModelConfig, get_model, list_models
from c3kit.workload.ops import Attention, Collective, Gemm, MemOp, Op, is_comm
from c3kit.workload.parallel import Parallelism

__all__ = ["Attention", "Collective", "Gemm", "MemOp", "MemoryReport", "ModelConfig", "Node", "Op", "Parallelism", "StepGraph",
           "build_step", "check_fits", "get_model", "is_comm", "list_models", "memory_report"]
