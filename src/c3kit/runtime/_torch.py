"""The one place that imports torch for the runtime, turning a missing install into RuntimeSetupError."""

from __future__ import annotations

from c3kit.errors import RuntimeSetupError

INSTALL_HINT = "install PyTorch with `pip install 'c3kit[torch]'` (or `pip install torch`)"


def require_torch():
    """Return the torch module, or raise RuntimeSetupError with an install hint."""
    try:
        import torch
        import torch.distributed  # noqa: F401
    except ImportError as e:
        raise RuntimeSetupError(f"the c3kit runtime needs PyTorch, which is not importable ({e}): {INSTALL_HINT}") from None
    return torch


def torch_available() -> bool:
    """True when torch can be imported."""
    try:
        require_torch()
    except RuntimeSetupError:
        return False
    return True


DTYPES = ("bf16", "fp16", "fp32")


def torch_dtype(name: str):
    """The torch dtype for a c3kit dtype name (bf16, fp16, fp32)."""
    torch = require_torch()
    table = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    if name not in table:
        raise RuntimeSetupError(f"unknown dtype {name!r}: use one of {', '.join(table)}")
    return table[name]


def dtype_name(dtype) -> str:
    """The c3kit name of a torch dtype."""
    torch = require_torch()
    table = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}
    return table.get(dtype, str(dtype).replace("torch.", ""))
