"""An SM-based copy kernel with a grid of exactly k thread blocks: a stand-in for an SM collective."""

from __future__ import annotations

from functools import lru_cache

BLOCK = 4096  # int32 elements per block iteration: 16 KB, enough loads in flight per SM


@lru_cache(maxsize=1)
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def _copy(src, dst, n, iters, BLOCK: tl.constexpr):
        pid = tl.program_id(0).to(tl.int64)
        nprog = tl.num_programs(0).to(tl.int64)
        for i in range(0, iters):
            idx = (i * nprog + pid) * BLOCK + tl.arange(0, BLOCK)
            mask = idx < n
            tl.store(dst + idx, tl.load(src + idx, mask=mask), mask=mask)

    return _copy


def available() -> tuple[bool, str]:
    """Whether Triton (and so the k-block copy kernel) is usable, and why not."""
    try:
        import triton  # noqa: F401
    except ImportError as e:
        return False, f"triton not importable ({e})"
    return True, ""


def sm_copy(src, dst, blocks: int) -> None:
    """Copy src into dst (same size, contiguous) with a grid of `blocks` programs on the current stream."""
    s, d = src.view(-1).view(_int32(src)), dst.view(-1).view(_int32(dst))
    if s.numel() != d.numel():
        raise ValueError("sm_copy: src and dst differ in size")
    blocks = int(blocks)
    iters = -(-s.numel() // (blocks * BLOCK))
    _kernel()[(blocks,)](s, d, s.numel(), iters, BLOCK=BLOCK, num_warps=8)


def _int32(t):
    import torch

    if (t.numel() * t.element_size()) % 4:
        raise ValueError("sm_copy: buffer size must be a multiple of 4 bytes")
    return torch.int32
