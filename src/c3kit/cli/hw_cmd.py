"""CLI: `c3kit hw list`, `c3kit hw show NAME [--project RULE --generations N]`, `c3kit hw rules`."""

from __future__ import annotations

import typer

from c3kit.cli.common import JSON_OPT, console, emit_json, rich_table

hw_app = typer.Typer(help="The hardware catalog and future-hardware projections.", no_args_is_help=True)


def _summary(g) -> dict:
    return {
        "name": g.name, "vendor": g.vendor, "bf16_tflops": g.peak_flops("bf16") / 1e12,
        "fp8_tflops": g.flops["fp8"] / 1e12 if "fp8" in g.flops else None,
        "hbm_gb": g.hbm_bytes / 1e9, "hbm_tbps": g.hbm_bw / 1e12,
        "scaleup_gbps": g.scaleup.bw / 1e9, "topology": g.scaleup.topology,
        "gpus_per_node": g.gpus_per_node, "nic_gbps": g.scaleout_bw / 1e9, "dma_engines": g.dma.engines,
    }


@hw_app.command("list")
def list_cmd(json_out: bool = JSON_OPT) -> None:
    """List every GPU in the catalog."""
    from c3kit.hw import list_gpus

    rows = [_summary(g) for g in list_gpus()]
    if json_out:
        emit_json({"gpus": rows})
        return
    cols = ["name", "vendor", "bf16 TF/s", "fp8 TF/s", "HBM GB", "HBM TB/s", "up GB/s", "topology",
            "GPUs/node", "NIC GB/s", "DMA"]
    table = rich_table("c3kit hardware catalog (dense peaks, per-direction bandwidths)", cols,
                       [[r["name"], r["vendor"], r["bf16_tflops"], r["fp8_tflops"] if r["fp8_tflops"] else "-",
                         r["hbm_gb"], r["hbm_tbps"], r["scaleup_gbps"], r["topology"], r["gpus_per_node"],
                         r["nic_gbps"], r["dma_engines"]] for r in rows])
    table.columns[0].no_wrap = True  # names must stay whole and copyable on narrow terminals
    table.columns[0].min_width = max(len(r["name"]) for r in rows)
    console.print(table)


@hw_app.command("show")
def show_cmd(
    name: str = typer.Argument(..., help="GPU name or alias (see `c3kit hw list`), or a TOML file."),
    project: str = typer.Option(None, "--project", help="Scaling rule to project with (see `c3kit hw rules`)."),
    generations: int = typer.Option(1, "--generations", help="Generations to project (with --project)."),
    json_out: bool = JSON_OPT,
) -> None:
    """Show one GPU with the source of every number, optionally projected into the future."""
    from c3kit.errors import HardwareError
    from c3kit.hw import get_gpu
    from c3kit.hw.future import project as project_gpu

    gpu = get_gpu(name)
    if project is not None:
        gpu = project_gpu(gpu, project, generations)
    elif generations != 1:
        raise HardwareError("--generations needs --project RULE (see `c3kit hw rules`)")
    d = gpu.to_dict()
    if json_out:
        emit_json(d)
        return
    from c3kit.units import fmt_bytes, fmt_rate, fmt_time

    rows = [["vendor", gpu.vendor, ""], ["SMs / CUs", gpu.sms, _src(gpu, "sms")],
            ["clock", f"{gpu.clock / 1e9:.3g} GHz", _src(gpu, "clock")]]
    rows += [[f"dense {k}", fmt_rate(v, "FLOP/s"), _src(gpu, "flops") if i == 0 else "(as above)"]
             for i, (k, v) in enumerate(gpu.flops.items())]
    rows += [
        ["HBM capacity", fmt_bytes(gpu.hbm_bytes), _src(gpu, "hbm_bytes")],
        ["HBM bandwidth", fmt_rate(gpu.hbm_bw), _src(gpu, "hbm_bw")],
        ["L2", fmt_bytes(gpu.l2_bytes), _src(gpu, "l2_bytes")],
        ["GPUs per node", gpu.gpus_per_node, _src(gpu, "gpus_per_node")],
        ["scale-up", f"{gpu.scaleup.topology}, {fmt_rate(gpu.scaleup.bw)} per direction, "
                     f"{gpu.scaleup.links_per_gpu} links", _src(gpu, "scaleup")],
        ["scale-up latency", fmt_time(gpu.scaleup.latency), _src(gpu, "scaleup.latency")],
        ["scale-out NIC", fmt_rate(gpu.scaleout_bw), _src(gpu, "scaleout_bw")],
        ["scale-out latency", fmt_time(gpu.scaleout_latency), _src(gpu, "scaleout_latency")],
        ["DMA engines", f"{gpu.dma.engines} x {fmt_rate(gpu.dma.bw_per_engine)}, launch "
                        f"{fmt_time(gpu.dma.launch)}, sync {fmt_time(gpu.dma.sync)}", _src(gpu, "dma")],
    ]
    if gpu.notes:
        rows.append(["notes", "", gpu.notes])
    if "projection" in gpu.sources:
        rows.append(["projection", "", gpu.sources["projection"]])
    console.print(rich_table(gpu.name, ["field", "value", "source"], rows))


def _src(gpu, key: str) -> str:
    return gpu.sources.get(key) or gpu.sources.get(key.split(".")[0], "")


@hw_app.command("rules")
def rules_cmd(json_out: bool = JSON_OPT) -> None:
    """List the future-hardware scaling rules and their per-generation factors."""
    from c3kit.hw.future import list_rules

    rules = [{"name": r.name, **r.factors(), "source": r.source} for r in list_rules()]
    if json_out:
        emit_json({"rules": rules})
        return
    cols = ["rule", "compute", "HBM bw", "HBM capacity", "scale-up", "scale-out", "source"]
    console.print(rich_table("scaling rules (x per generation)", cols,
                             [[r["name"], r["compute"], r["mem_bw"], r["mem_capacity"], r["scaleup_bw"],
                               r["scaleout_bw"], r["source"]] for r in rules]))


def register(app: typer.Typer) -> None:
    """Add this module's commands to the c3kit app."""
    app.add_typer(hw_app, name="hw")
