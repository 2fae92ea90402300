"""Processing-in-memory: a command-level PIM model, PIMnast GEMV placement, Inclusive-PIM, JIT-Q."""

from c3kit.pim.model import Host, PimMemory, PimTiming, get_pim, list_pims, pim_from_dict

__all__ = ["Host", "PimMemory", "PimTiming", "get_pim", "list_pims", "pim_from_dict"]
