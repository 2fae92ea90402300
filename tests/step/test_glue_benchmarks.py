"""The profile summary: the split backward's cat as c3kit prices it against the profiled SplitWithSizesBackward0,
op by op, and its bad input."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "benchmarks" / "ops_h200" / "h200-sxm-train-profile.json"


def test_profile_summary_qkv_cat_matches_the_profiled_split_backward(load_benchmark):
    lines = load_benchmark("profile_train_step").summarize(PROFILE)
    cases = [i for i, ln in enumerate(lines) if not ln.startswith(" ")]
    assert len(cases) == 3
    for start, end in zip(cases, cases[1:] + [len(lines)]):
        block = "\n".join(lines[start:end])
        prof = float(re.search(r"profile SplitWithSizesBackward0\s+\d+ calls\s+([\d.]+) ms", block).group(1))
        mine = float(re.search(r"c3kit   qkv.cat\s+\d+ calls\s+([\d.]+) ms", block).group(1))
        assert abs(mine / prof - 1) < 0.2  # the measured copy class prices the cat within 20% of the profile


def test_profile_summary_bad_file(tmp_path, capsys, load_benchmark):
    mod = load_benchmark("profile_train_step")
    assert mod.main(["--summarize", str(tmp_path / "none.json")]) == 2
    assert capsys.readouterr().err.startswith("error:")
    assert mod.main([]) == 2
