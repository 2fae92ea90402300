"""The DMA-Latte study: shape against the published MI300X figures, H200 overrides, and bad input."""

import pytest

from c3kit.cost.dma import single_copy_time
from c3kit.errors import StudyError
from c3kit.studies.dma_latte import KB, MB, PUBLISHED_SHARE, default_sizes, h200_params, mi300x_params, run


def test_sizes_are_powers_of_two():
    s = default_sizes(1 * KB, 1 * 2**30)
    assert len(s) == 21 and s[0] == 1024 and s[-1] == 2**30
    with pytest.raises(StudyError):
        default_sizes(4 * KB, 1 * KB)


def test_mi300x_share_follows_the_published_shape():
    p, _ = mi300x_params()
    for size, pub in PUBLISHED_SHARE.items():
        assert abs(single_copy_time(size, p).non_copy_share - pub) < 0.06, size
    # hand check at 1 MiB: (4.3 + 0.52 + 1.1) / (4.3 + 0.52 + 2.8 + 2^20 / 44.5e9 * 1e6 + 1.1) us
    copy_us = 2.8 + 2**20 / 44.5e9 * 1e6
    assert single_copy_time(1 * MB, p).non_copy_share == pytest.approx(5.92 / (5.92 + copy_us))


def test_study_tables_and_headline():
    r = run(quick=True)
    assert {"metric", "ours", "published", "gap"} <= set(r.summary.columns)
    assert r.headline["mi300x_share_mean_abs_gap_points"] < 5
    sp = r.summary[r.summary.metric == "best/pcpy speedup"]
    assert (sp.ours >= 1).all() and len(sp) == 10
    v = r.tables["dma_variants"]
    assert set(v.gpu) == {"MI300X", "H200-SXM"}
    assert (v.groupby(["gpu", "kind", "bytes"]).speedup_vs_pcpy.max() >= 1 - 1e-12).all()


def test_h200_parameters_can_be_set_from_measurements():
    base, _ = h200_params()
    p, origin = h200_params({"launch": 10e-6})
    assert p.launch == 10e-6 and p.sync == base.sync and "overrides" in origin
    with pytest.raises(Exception, match="unknown DMA parameter"):
        h200_params({"bogus": 1.0})


def test_bad_ranks():
    with pytest.raises(StudyError):
        run(ranks=1)


def test_h200_from_a_runtime_dma_file(tmp_path):
    import json

    # the runtime's bench comm file: kind dma, columns bytes, seconds, ranks (single copy-engine pulls)
    rows = [[s, 8e-6 + s / 120e9, 8] for s in (2**12, 2**20, 2**26)]
    f = tmp_path / "h200-sxm-dma.json"
    f.write_text(json.dumps({"meta": {}, "kind": "dma", "columns": ["bytes", "seconds", "ranks"], "rows": rows}))
    p, origin = h200_params(calib=f)
    assert p.bw_per_engine == pytest.approx(120e9, rel=1e-6) and "calibration" in origin
    r = run(quick=True, h200_calib=f)
    assert r.headline["h200_origin"].startswith("calibration")
