"""Hardware: GPUs, fabrics, DMA engines, the shipped catalog and future-hardware scaling rules."""

from c3kit.hw.catalog import get_gpu, list_gpus
from c3kit.hw.future import RULES, ScalingRule, get_rule, list_rules, project
from c3kit.hw.model import GPU, DMAEngines, ScaleUp, dtype_bytes

__all__ = ["GPU", "DMAEngines", "ScaleUp", "dtype_bytes", "get_gpu", "list_gpus",
           "RULES", "ScalingRule", "get_rule", "list_rules", "project"]
