"""Runtime API without several processes: torch stays optional, schedule names, C3 metrics, bench CLI."""

import json
import math
import subprocess
import sys

import pytest

from c3kit.errors import RuntimeSetupError
from c3kit.runtime import schedules


def test_importing_c3kit_and_runtime_does_not_import_torch():
    code = "import sys, c3kit, c3kit.runtime, c3kit.runtime.schedules, c3kit.cli.bench_cmd; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_missing_torch_raises_setup_error_with_install_hint():
    code = ("import sys; sys.modules['torch'] = None\n"
            "from c3kit.runtime import all_gather_matmul\n"
            "from c3kit.errors import RuntimeSetupError\n"
            "try:\n    all_gather_matmul(None, None)\nexcept RuntimeSetupError as e:\n    print('hint' , 'pip install' in str(e))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "hint True", out.stderr


def test_missing_torch_through_the_cli_is_one_error_line():
    code = ("import sys; sys.modules['torch'] = None\n"
            "from c3kit.cli.main import main\n"
            "sys.exit(main(['bench', 'gemm', '--shapes', '8x8x8']))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 2
    assert out.stderr.startswith("error: ") and "Traceback" not in out.stderr


def test_schedule_names_and_auto():
    assert schedules.resolve_schedule("ring", "all_gather_matmul", 64, 8, 8, 2, 2) == "ring"
    assert schedules.resolve_schedule("auto", "all_gather_matmul", 64, 8, 8, 1, 2) == "serial"
    for op in ("all_gather_matmul", "matmul_reduce_scatter", "moe"):
        for m in (8, 4096, 65536):
            assert schedules.resolve_schedule("auto", op, m, 1024, 1024, 4, 2) in schedules.CONCRETE
    with pytest.raises(RuntimeSetupError):
        schedules.resolve_schedule("fused", "all_gather_matmul", 64, 8, 8, 2, 2)
    with pytest.raises(RuntimeSetupError):
        schedules.check_backend("mpi")


def test_fallback_rule():
    assert schedules.fallback_schedule("all_gather_matmul", 64, 64, 64, 8, 2) == "serial"  # 8 KB: too small
    assert schedules.fallback_schedule("all_gather_matmul", 8 * 8 * 512, 4096, 4096, 8, 2) == "ficco"
    assert schedules.fallback_schedule("all_gather_matmul", 8 * 8 * 64, 4096, 4096, 8, 2) == "ring"


def test_c3_metrics_hand_checked():
    from c3kit.runtime.bench.c3 import classify, fraction_of_ideal

    assert classify(2.0, 1.0) == "G-long" and classify(1.0, 2.0) == "C-long" and classify(1.0, 1.1) == "GC-equal"
    s_ideal, s_real, frac = fraction_of_ideal(2.0, 1.0, 2.5)  # serial 3, ideal 2
    assert s_ideal == pytest.approx(1.5) and s_real == pytest.approx(1.2) and frac == pytest.approx(0.4)
    assert math.isclose(fraction_of_ideal(1.0, 1.0, 1.0)[2], 1.0)


torch = pytest.importorskip("torch", reason="bench needs PyTorch")


def test_bench_gemm_on_cpu_writes_a_calibration_file(tmp_path):
    from c3kit.cli.main import main
    from c3kit.cost.table import read_calibration

    out = tmp_path / "cpu-gemm.json"
    rc = main(["bench", "gemm", "--dtypes", "fp32", "--shapes", "32x16x8,16x16x16", "--split-shapes", "16x16x16",
               "--max-chunks", "4", "--target-ms", "1", "--out", str(out), "--script", "tests"])
    assert rc == 0
    doc = read_calibration(out)
    assert doc["kind"] == "gemm" and len(doc["rows"]) == 2
    for key in ("machine", "gpu", "driver", "torch", "cuda", "date", "command", "script"):
        assert key in doc["meta"]
    assert doc["meta"]["torch"] == torch.__version__ and doc["meta"]["script"] == "tests"
    split = json.loads((tmp_path / "cpu-gemm-split.json").read_text())
    # whole + 2 and 4 chunks along each of M, N, K
    assert len(split["rows"]) == 1 + 3 * 2
    assert all(r[split["columns"].index("time_s")] > 0 for r in split["rows"])


def test_bench_bad_input_exits_2(tmp_path):
    from c3kit.cli.main import main

    assert main(["bench", "gemm", "--dtypes", "int4", "--out", str(tmp_path / "x.json")]) == 2
    assert main(["bench", "gemm", "--shapes", "3x4", "--out", str(tmp_path / "x.json")]) == 2
    assert main(["bench", "c3", "--device", "cpu", "--out", str(tmp_path / "x.json")]) == 2


def test_ops_check_inputs_before_communicating():
    from c3kit.runtime import ops

    with pytest.raises(RuntimeSetupError, match="inner sizes"):
        ops.all_gather_matmul(torch.randn(4, 3), torch.randn(4, 5), comm="gloo")
    with pytest.raises(RuntimeSetupError, match="not initialized"):
        ops.all_gather_matmul(torch.randn(4, 4), torch.randn(4, 5), comm="gloo")
    with pytest.raises(RuntimeSetupError, match="CUDA"):
        ops.all_gather_matmul(torch.randn(4, 4), torch.randn(4, 5), comm="copy-engine")


def test_auto_asks_the_selector_among_what_the_runtime_realizes():
    from c3kit.overlap import OverlapProblem, select

    for backend, realized in schedules.REALIZED.items():
        for m in (4096, 65536):
            ch = schedules.choose_auto("all_gather_matmul", m, 1024, 1024, 4, 2, backend)
            prob = OverlapProblem("ag_gemm", m, 1024, 1024, gpus=4)
            assert ch.engine_schedule == select(prob, "H200-SXM", candidates=tuple(realized))[0]
            assert ch.schedule == realized[ch.engine_schedule]
            assert ch.engine_best == select(prob, "H200-SXM")[0]
            assert (ch.note == "") == (ch.engine_best == ch.engine_schedule)
            if ch.note:
                assert ch.engine_best in ch.note and "does not realize" in ch.note
    # sizes the engine cannot price (rows that do not divide over the ranks) use the size rule, and say so
    ch = schedules.choose_auto("all_gather_matmul", 4097, 1024, 1024, 4, 2, "nccl")
    assert ch.engine_schedule == "" and "cannot price" in ch.note
    assert ch.schedule == schedules.fallback_schedule("all_gather_matmul", 4097, 1024, 1024, 4, 2)
