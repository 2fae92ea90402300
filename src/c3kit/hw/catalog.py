"""The hardware catalog: TOML files shipped in c3kit/hw/data, one GPU each, every number sourced."""

from __future__ import annotations

import difflib
import tomllib
from functools import lru_cache
from importlib import resources
from pathlib import Path

from c3kit.errors import HardwareError
from c3kit.hw.future import PROJECTED, project
from c3kit.hw.model import DTYPE_BYTES, GPU, DMAEngines, ScaleUp


_SCALARS = ("sms", "clock", "hbm_bytes", "hbm_bw", "l2_bytes", "gpus_per_node", "scaleout_bw", "scaleout_latency")


def _source_for(sources: dict, key: str) -> bool:
    """True when a key, or its table (the part before the first dot), has a non-empty source."""
    return any(isinstance(sources.get(k), str) and sources[k].strip() for k in (key, key.split(".")[0]))


def gpu_from_dict(d: dict, origin: str = "<dict>") -> GPU:
    """Build a GPU from a parsed catalog document, checking that every number carries a source."""
    try:
        sources = dict(d.get("sources", {}))
        missing = [k for k in (*_SCALARS, "flops", "scaleup", "dma") if not _source_for(sources, k)]
        if missing:
            raise HardwareError(f"{origin}: numbers without a source: {', '.join(missing)} "
                                f"(add a line for each to the [sources] table)")
        bad = [k for k in d["flops"] if k not in DTYPE_BYTES]
        if bad:
            raise HardwareError(f"{origin}: unknown dtype(s) {', '.join(bad)} in [flops]; use {', '.join(DTYPE_BYTES)}")
        return GPU(
            name=d["name"], vendor=d["vendor"], sms=int(d["sms"]), clock=float(d["clock"]),
            flops={k: float(v) for k, v in d["flops"].items()},
            hbm_bytes=float(d["hbm_bytes"]), hbm_bw=float(d["hbm_bw"]), l2_bytes=float(d["l2_bytes"]),
            gpus_per_node=int(d["gpus_per_node"]),
            scaleup=ScaleUp(topology=d["scaleup"]["topology"], bw=float(d["scaleup"]["bw"]),
                            links_per_gpu=int(d["scaleup"]["links_per_gpu"]),
                            latency=float(d["scaleup"]["latency"]),
                            launch=float(d["scaleup"].get("launch", 0.0))),
            scaleout_bw=float(d["scaleout_bw"]), scaleout_latency=float(d["scaleout_latency"]),
            dma=DMAEngines(engines=int(d["dma"]["engines"]), bw_per_engine=float(d["dma"]["bw_per_engine"]),
                           launch=float(d["dma"]["launch"]), sync=float(d["dma"]["sync"])),
            sources=sources, notes=d.get("notes", ""),
        )
    except KeyError as e:
        raise HardwareError(f"{origin}: missing field {e.args[0]!r}") from None
    except (TypeError, ValueError) as e:
        if isinstance(e, HardwareError):
            raise
        raise HardwareError(f"{origin}: malformed entry ({e})") from None


@lru_cache(maxsize=1)
def _catalog() -> dict[str, tuple[GPU, tuple[str, ...]]]:
    out: dict[str, tuple[GPU, tuple[str, ...]]] = {}
    for entry in resources.files("c3kit.hw").joinpath("data").iterdir():
        if entry.name.endswith(".toml"):
            d = tomllib.loads(entry.read_text())
            if "pim" in d:  # PIM memories live in the same folder but are read by c3kit.pim
                continue
            gpu = gpu_from_dict(d, entry.name)
            out[gpu.name] = (gpu, tuple(d.get("aliases", ())))
    return out


@lru_cache(maxsize=1)
def _index() -> dict[str, GPU]:
    index: dict[str, GPU] = {}
    for gpu, aliases in _catalog().values():
        for key in (gpu.name, *aliases):
            index[key.lower()] = gpu
    return index


@lru_cache(maxsize=256)
def _projected(base: str, rule: str, gens: int) -> GPU:
    return project(get_gpu(base), rule, gens)


def list_gpus() -> list[GPU]:
    """Every GPU in the catalog, sorted by vendor then name."""
    return sorted((g for g, _ in _catalog().values()), key=lambda g: (g.vendor, g.name))


def get_gpu(name: str) -> GPU:
    """Look a GPU up by name or alias (case-insensitive), a projection 'NAME+Ng(RULE)', or a TOML path."""
    if name.endswith(".toml") and Path(name).is_file():
        try:
            return gpu_from_dict(tomllib.loads(Path(name).read_text()), name)
        except tomllib.TOMLDecodeError as e:
            raise HardwareError(f"{name}: not valid TOML ({e})") from None
        except UnicodeDecodeError:
            raise HardwareError(f"{name}: not a text file (a GPU entry is UTF-8 TOML)") from None
    m = PROJECTED.match(name.strip())
    if m:
        return _projected(m["base"], m["rule"].lower(), int(m["gens"]))
    index = _index()
    hit = index.get(name.lower())
    if hit is not None:
        return hit
    close = difflib.get_close_matches(name.lower(), list(index), n=3, cutoff=0.4)
    names = sorted({index[c].name for c in close})
    hint = f"; did you mean {', '.join(names)}?" if names else ""
    raise HardwareError(f"unknown hardware {name!r}{hint} (see `c3kit hw list`)")
