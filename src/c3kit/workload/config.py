"""ModelConfig: the sizes of a decoder-only Transformer, and building one from a preset table."""

from __future__ import annotations

from dataclasses import dataclass, field

from c3kit.errors import WorkloadError

NORMS = ("layernorm", "rmsnorm")
POSITIONS = ("learned", "rope", "alibi")


@dataclass(frozen=True)
class ModelConfig:
    """A decoder-only Transformer. Sizes in elements; 0 for an optional size means "derive the default".

    kv_heads defaults to heads (multi-head attention), head_dim to hidden / heads, ffn_hidden to
    4 * hidden, moe_ffn_hidden to ffn_hidden. n_experts == 1 is a dense model; with n_experts > 1
    every layer's MLP is a mixture of experts with top_k experts per token (Mixtral style).
    """

    name: str
    hidden: int
    layers: int
    heads: int
    kv_heads: int = 0
    head_dim: int = 0
    ffn_hidden: int = 0
    vocab: int = 51200
    gated_mlp: bool = False  # SwiGLU / GeGLU: three FFN matrices (gate, up, down)
    norm: str = "layernorm"
    n_experts: int = 1
    top_k: int = 1
    moe_ffn_hidden: int = 0
    max_seq: int = 2048
    tied_embeddings: bool = False
    position: str = "learned"  # learned absolute positions add max_seq * hidden parameters
    bias: bool = False  # linear-layer biases (GPT-2/3, Megatron GPT); tiny, counted when set
    dropout: bool = False  # dropout after attention/MLP (GPT-style training); adds 1-byte masks to activations
    sources: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise WorkloadError(f"model name must be a non-empty string, got {self.name!r}")
        for key in ("hidden", "layers", "heads", "vocab", "max_seq", "n_experts", "top_k"):
            v = getattr(self, key)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise WorkloadError(f"model {self.name}: {key} must be a positive integer, got {v!r}")
        for key in ("kv_heads", "head_dim", "ffn_hidden", "moe_ffn_hidden"):
            v = getattr(self, key)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise WorkloadError(f"model {self.name}: {key} must be a positive integer, got {v!r}")
        for key in ("gated_mlp", "tied_embeddings", "bias", "dropout"):
            v = getattr(self, key)
            if not isinstance(v, bool):  # a model TOML file's bias = "yes" must not read as true
                raise WorkloadError(f"model {self.name}: {key} must be true or false, got {v!r}")
        if self.kv_heads == 0:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.head_dim == 0:
            if self.hidden % self.heads:
                raise WorkloadError(f"model {self.name}: hidden {self.hidden} is not divisible by heads "
                                    f"{self.heads}; give head_dim explicitly")
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        if self.ffn_hidden == 0:
            object.__setattr__(self, "ffn_hidden", 4 * self.hidden)
        if self.moe_ffn_hidden == 0:
            object.__setattr__(self, "moe_ffn_hidden", self.ffn_hidden)
        if self.heads % self.kv_heads:
            raise WorkloadError(f"model {self.name}: heads {self.heads} must be a multiple of kv_heads "
                                f"{self.kv_heads} (grouped-query attention)")
        if self.top_k > self.n_experts:
            raise WorkloadError(f"model {self.name}: top_k {self.top_k} exceeds n_experts {self.n_experts}")
        if self.norm not in NORMS:
            raise WorkloadError(f"model {self.name}: norm {self.norm!r}: use one of {', '.join(NORMS)}")
        if self.position not in POSITIONS:
            raise WorkloadError(f"model {self.name}: position {self.position!r}: use one of {', '.join(POSITIONS)}")

    @property
    def is_moe(self) -> bool:
        """True when the MLP is a mixture of experts."""
        return self.n_experts > 1

    @property
    def q_dim(self) -> int:
        """Width of the query projection (heads * head_dim)."""
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the key (or value) projection (kv_heads * head_dim)."""
        return self.kv_heads * self.head_dim

    @property
    def ffn_matrices(self) -> int:
        """Weight matrices per FFN: 3 with a gated MLP (SwiGLU), else 2."""
        return 3 if self.gated_mlp else 2

    def attn_params(self) -> int:
        """Parameters of one layer's attention block (QKV, output projection, biases)."""
        h = self.hidden
        p = h * (self.q_dim + 2 * self.kv_dim) + self.q_dim * h
        if self.bias:
            p += self.q_dim + 2 * self.kv_dim + h
        return p

    def expert_params(self) -> int:
        """Parameters of one FFN (one expert for MoE models)."""
        f = self.moe_ffn_hidden if self.is_moe else self.ffn_hidden
        p = self.ffn_matrices * self.hidden * f
        if self.bias:
            p += (self.ffn_matrices - 1) * f + self.hidden
        return p

    def mlp_params(self) -> int:
        """Parameters of one layer's MLP: all experts plus the router for MoE models."""
        if self.is_moe:
            return self.n_experts * self.expert_params() + self.hidden * self.n_experts
        return self.expert_params()

    def norm_params(self) -> int:
        """Parameters of one layer's two norms (scale, plus shift for LayerNorm)."""
        return 2 * self.hidden * (2 if self.norm == "layernorm" else 1)

    def layer_params(self) -> int:
        """Parameters of one Transformer layer."""
        return self.attn_params() + self.mlp_params() + self.norm_params()

    def embedding_params(self) -> int:
        """Input embedding (plus learned positions) and, when untied, the output projection."""
        p = self.vocab * self.hidden * (1 if self.tied_embeddings else 2)
        if self.position == "learned":
            p += self.max_seq * self.hidden
        return p

    def param_count(self) -> int:
        """Total parameters (all experts counted)."""
        final_norm = self.hidden * (2 if self.norm == "layernorm" else 1)
        return self.layers * self.layer_params() + self.embedding_params() + final_norm

    def active_param_count(self) -> int:
        """Parameters touched per token (top_k of n_experts experts)."""
        if not self.is_moe:
            return self.param_count()
        inactive = (self.n_experts - self.top_k) * self.expert_params()
        return self.param_count() - self.layers * inactive

    def to_dict(self) -> dict:
        """Plain JSON-ready fields plus parameter counts."""
        d = {k: getattr(self, k) for k in _FIELDS_ORDER}
        d["sources"] = dict(self.sources)
        d["params"] = self.param_count()
        d["active_params"] = self.active_param_count()
        return d

    def source(self, key: str) -> str:
        """The source given for a field (or "" when none)."""
        return dict(self.sources).get(key, "")


_FIELDS_ORDER = tuple(f for f in ModelConfig.__dataclass_fields__ if f != "sources")
_FIELDS = set(_FIELDS_ORDER)


def model_from_dict(d: dict, origin: str = "<dict>") -> ModelConfig:
    """Build a ModelConfig from a preset table, rejecting unknown keys."""
    unknown = set(d) - _FIELDS - {"sources", "aliases", "published_params", "notes"}
    if unknown:
        raise WorkloadError(f"{origin}: unknown model field(s) {', '.join(sorted(unknown))}")
    for key in ("name", "hidden", "layers", "heads"):
        if key not in d:
            raise WorkloadError(f"{origin}: model entry is missing {key!r}")
    kwargs = {k: v for k, v in d.items() if k in _FIELDS}
    sources = tuple((str(k), str(v)) for k, v in d.get("sources", {}).items())
    try:
        return ModelConfig(**kwargs, sources=sources)
    except TypeError as e:
        raise WorkloadError(f"{origin}: malformed model entry ({e})") from None


def read_text_file(path, noun: str, hint: str) -> str:
    """The text of a user's file, or one WorkloadError line: no such `noun`, not a text file (`hint`), unreadable."""
    from pathlib import Path

    p = Path(path)
    try:
        return p.read_text()
    except FileNotFoundError:
        raise WorkloadError(f"{p}: no such {noun}") from None
    except UnicodeDecodeError:
        raise WorkloadError(f"{p}: not a text file ({hint})") from None
    except OSError as e:
        raise WorkloadError(f"{p}: cannot read ({e.strerror or e})") from None

