"""A vLLM-like iteration scheduler: continuous batching, a token budget, chunked prefill, paged KV, preemption.

Per iteration (vLLM V1 order): every running request in decode gets one token; running requests
still in prefill get the next chunk of their prompt (chunked prefill) within the token budget
`max_batched_tokens`; then waiting requests are admitted first-come first-served while the budget,
`max_seqs` and free KV blocks allow (not in an iteration that preempted). KV lives in blocks of
`block_size` tokens; a request holds ceil(tokens with KV / block_size) blocks. When a decode step
needs a block and none is free, the newest running request is preempted by recompute: its blocks
are freed and it returns to the front of the queue to prefill its prompt and the tokens it already
generated. A prefill chunk that finds too few free blocks is shortened to what fits (skipped at 0);
if nothing at all can run, the newest running request is preempted.

Without chunked prefill (vLLM V0's default) an iteration either prefills whole prompts of newly
admitted requests (prefill first) or decodes every running request, never both. With `mixed_batches`
(TensorRT-LLM's in-flight batching without chunked context) whole prompts join the decode batch in
the same iteration, within the token budget left after one token per decoding request.

`reserve_kv` is TensorRT-LLM's GUARANTEED_NO_EVICT capacity policy: a request is admitted only when
the blocks of its whole life (prompt plus every output token) are free; they stay reserved for it,
so a running request never runs out of KV and nothing is preempted.

Decode bookkeeping is O(1) per iteration, not O(batch): a request in decode computes one token in
every decode iteration, so its KV length is `base + kd` (kd counts decode iterations); requests are
counted by `base mod block_size` (which of them need a new block this iteration) and filed under
the decode iteration they finish in.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from c3kit.serve.workload import ServeError, Workload

WAITING, PREFILL, DECODE, DONE = 0, 1, 2, 3


@dataclass(frozen=True)
class SchedulerConfig:
    """Scheduler limits (vLLM names): token budget, sequences per batch, chunked prefill, KV blocks."""

    kv_blocks: int
    max_batched_tokens: int = 8192
    max_seqs: int = 256
    chunked_prefill: bool = True
    block_size: int = 16
    mixed_batches: bool = False  # without chunked prefill: whole prompts run beside the decode batch
    reserve_kv: bool = False  # admit a request only with KV for its whole life reserved (no preemption)

    def __post_init__(self) -> None:
        for k in ("kv_blocks", "max_batched_tokens", "max_seqs", "block_size"):
            v = getattr(self, k)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ServeError(f"scheduler: {k.replace('_', '-')} must be a whole number >= 1, got {v!r}")
        if self.max_batched_tokens < self.max_seqs:
            raise ServeError(f"--max-batched-tokens ({self.max_batched_tokens}) must be >= --max-seqs "
                             f"({self.max_seqs}): every running request must fit its decode token in the budget")

    def check(self, w: Workload) -> None:
        """Raise ServeError when one request of the workload can never run under these limits."""
        bs = self.block_size
        longest = int((w.prompt + w.output).max())
        need = -(-(longest - 1) // bs)
        if need > self.kv_blocks:
            raise ServeError(f"the KV cache holds {self.kv_blocks * bs} tokens ({self.kv_blocks} blocks of {bs}) "
                             f"but one request needs {longest - 1}: raise --tp/--pp, use a GPU with more memory "
                             "or shorten the requests")
        # a prompt runs whole without chunking; after a preemption (recompute) its output so far too
        whole = int(w.prompt.max()) if self.reserve_kv else longest
        if not self.chunked_prefill and whole > self.max_batched_tokens:
            raise ServeError(f"without chunked prefill --max-batched-tokens ({self.max_batched_tokens}) must hold "
                             f"the longest request ({whole} tokens): raise it or use --chunked-prefill")


class Batch:
    """One iteration's work: prefill chunks (tokens, context before) of requests `rids`, decode count and KV."""

    __slots__ = ("rids", "prefill", "decode", "decode_kv", "preempted", "decode_ran")

    def __init__(self) -> None:
        self.rids: list[int] = []
        self.prefill: list[tuple[int, int]] = []
        self.decode = 0
        self.decode_kv = 0  # sum over decoding requests of the KV length their attention reads
        self.preempted = 0
        self.decode_ran = False

    @property
    def tokens(self) -> int:
        """Tokens computed in this iteration."""
        return self.decode + sum(n for n, _ in self.prefill)

    @property
    def empty(self) -> bool:
        """True when nothing runs."""
        return self.decode == 0 and not self.prefill


class Scheduler:
    """State of one server replica's scheduler over a workload (request ids are workload indices)."""

    def __init__(self, workload: Workload, config: SchedulerConfig):
        config.check(workload)
        n = workload.n
        self.cfg = config
        self.prompt = workload.prompt.tolist()
        self.out = workload.output.tolist()
        self.status = [WAITING] * n
        self.comp = [0] * n  # tokens with KV (prefill state; decode: base + kd)
        self.gen = [0] * n  # tokens generated (prefill state; decode: comp + 1 - prompt)
        self.held = [0] * n  # KV blocks held (prefill state; decode: ceil(comp / block))
        self.base = [0] * n
        self.kfin = [-1] * n
        self.first = [float("nan")] * n
        self.finish = [float("nan")] * n
        self.last_token = [float("nan")] * n
        self.preemptions = [0] * n
        self.gaps: list[float] = []  # inter-token gaps across a preemption (s)
        self.waiting: deque[int] = deque()
        self.running: list[int] = []  # admission order; the newest is last
        self.prefilling: list[int] = []
        self.bs = config.block_size
        self.phase = [0] * self.bs  # decoding requests by base mod block_size
        self.fin: dict[int, list[int]] = {}
        self.D = 0
        self.sum_base = 0
        self.kd = 0
        self.free = config.kv_blocks
        self.reserved = 0  # blocks reserved for running requests' future tokens (reserve_kv), not free
        self.resv = [0] * n  # a request's part of `reserved` (prefill state; decode: see _preempt)
        self.done = 0
        self.total_preemptions = 0

    # -- queries ----------------------------------------------------------------
    @property
    def idle(self) -> bool:
        """Nothing waiting or running."""
        return not self.waiting and not self.running

    @property
    def used_blocks(self) -> int:
        """KV blocks in use (reserved blocks not yet written are not in use)."""
        return self.cfg.kv_blocks - self.free - self.reserved

    def arrive(self, rid: int) -> None:
        """A request joins the end of the queue."""
        self.waiting.append(rid)

    def blocks_held(self, rid: int) -> int:
        """KV blocks a request holds now (between iterations)."""
        if self.status[rid] == DECODE:
            return -(-(self.base[rid] + self.kd) // self.bs)
        return self.held[rid] if self.status[rid] == PREFILL else 0

    # -- one iteration --------------------------------------------------------------
    def schedule(self, now: float) -> Batch:
        """Pick the next iteration's work (may preempt); the caller prices it and calls complete()."""
        b = Batch()
        cfg = self.cfg
        budget = cfg.max_batched_tokens
        if not cfg.chunked_prefill and not cfg.mixed_batches:
            budget = self._admit(b, budget, now, whole=True)
            if b.prefill:
                return b
        if self.D:
            k = self.kd
            slot = (-k) % self.bs
            if cfg.reserve_kv:  # the new blocks come out of the decoding requests' reservations
                self.reserved -= self.phase[slot]
                self.free += self.phase[slot]
            while self.free < self.phase[slot]:
                self._preempt(self.running[-1], now)
                b.preempted += 1
            self.free -= self.phase[slot]
            b.decode = self.D
            b.decode_kv = self.sum_base + self.D * (k + 1)
            b.decode_ran = True
            budget -= self.D
        if not cfg.chunked_prefill:
            if cfg.mixed_batches:  # whole prompts in the budget the decode batch left
                self._admit(b, budget, now, whole=True)
        else:
            for rid in self.prefilling:
                if budget <= 0:
                    break
                c, h = self.comp[rid], self.held[rid]
                n = min(self.prompt[rid] + self.gen[rid] - c, budget)
                need = -(-(c + n) // self.bs) - h
                if cfg.reserve_kv:
                    take = min(need, self.resv[rid])
                    self.resv[rid] -= take
                    self.reserved -= take
                    self.free += take
                if need > self.free:
                    n = min(n, (h + self.free) * self.bs - c)
                    if n <= 0:
                        continue
                    need = -(-(c + n) // self.bs) - h
                self.free -= need
                self.held[rid] = h + need
                budget -= n
                b.rids.append(rid)
                b.prefill.append((n, c))
            if not b.preempted:
                self._admit(b, budget, now, whole=False)
        if b.empty and self.running:
            # every running request is a partial prefill and no block is free: make room and retry
            self._preempt(self.running[-1], now)
            b2 = self.schedule(now)
            b2.preempted += 1
            return b2
        return b

    def _admit(self, b: Batch, budget: int, now: float, whole: bool) -> int:
        """Admit waiting requests first-come first-served; returns the budget left."""
        cfg, bs = self.cfg, self.bs
        w = self.waiting
        while w and len(self.running) < cfg.max_seqs and budget > 0:
            rid = w[0]
            target = self.prompt[rid] + self.gen[rid]
            if whole:
                if target > budget:
                    break
                n = target
            else:
                n = min(target, budget)
            need = -(-n // bs)
            extra = max(0, -(-(self.prompt[rid] + self.out[rid] - 1) // bs) - need) if cfg.reserve_kv else 0
            if need + extra > self.free:
                break
            w.popleft()
            self.free -= extra
            self.reserved += extra
            self.resv[rid] = extra
            self.status[rid] = PREFILL
            self.running.append(rid)
            self.prefilling.append(rid)
            self.comp[rid] = 0
            self.held[rid] = need
            self.free -= need
            budget -= n
            b.rids.append(rid)
            b.prefill.append((n, 0))
        return budget

    def _preempt(self, rid: int, now: float) -> None:
        """Free a running request's KV and put it at the front of the queue (recompute)."""
        st = self.status[rid]
        if st == DECODE:
            c = self.base[rid] + self.kd
            self.gen[rid] = c + 1 - self.prompt[rid]
            self.free += -(-c // self.bs)
            if self.cfg.reserve_kv:  # what is left of its reservation
                left = -(-(self.prompt[rid] + self.out[rid] - 1) // self.bs) - -(-c // self.bs)
                self.reserved -= left
                self.free += left
            self._leave_decode(rid)
            self.last_token[rid] = now
        else:
            self.free += self.held[rid] + self.resv[rid]
            self.reserved -= self.resv[rid]
            self.prefilling.remove(rid)
        self.resv[rid] = 0
        self.held[rid] = 0
        self.comp[rid] = 0
        self.status[rid] = WAITING
        self.running.remove(rid)
        self.waiting.appendleft(rid)
        self.preemptions[rid] += 1
        self.total_preemptions += 1

    def _leave_decode(self, rid: int) -> None:
        base = self.base[rid]
        self.phase[base % self.bs] -= 1
        self.D -= 1
        self.sum_base -= base

    def complete(self, b: Batch, now: float) -> None:
        """Account for a finished iteration at time `now`: tokens, first tokens, finished requests."""
        bs = self.bs
        if b.decode_ran:
            k = self.kd
            for rid in self.fin.pop(k, ()):
                if self.status[rid] == DECODE and self.kfin[rid] == k:
                    c = self.base[rid] + k
                    self.free += -(-(c + 1) // bs)
                    self._leave_decode(rid)
                    self._done(rid, now)
            self.kd = k + 1
        kd = self.kd
        for rid, (n, _) in zip(b.rids, b.prefill):
            if self.status[rid] != PREFILL:
                continue
            c = self.comp[rid] + n
            self.comp[rid] = c
            p = self.prompt[rid]
            if c < p + self.gen[rid]:
                continue
            g = self.gen[rid] + 1
            self.gen[rid] = g
            if self.first[rid] != self.first[rid]:  # NaN: the first token
                self.first[rid] = now
            else:
                self.gaps.append(now - self.last_token[rid])
            self.prefilling.remove(rid)
            if g >= self.out[rid]:
                self.free += self.held[rid]
                self.held[rid] = 0
                self._done(rid, now)
                continue
            base = c - kd
            self.base[rid] = base
            self.status[rid] = DECODE
            self.phase[base % bs] += 1
            self.D += 1
            self.sum_base += base
            kf = p + self.out[rid] - 2 - base
            self.kfin[rid] = kf
            self.fin.setdefault(kf, []).append(rid)

    def _done(self, rid: int, now: float) -> None:
        self.status[rid] = DONE
        self.finish[rid] = now
        self.running.remove(rid)
        self.done += 1
