"""The decode_cold rows become memory kinds rmsnorm_cold / residual_add_cold; a GPU without them prices warm."""

from c3kit.cost.opclass import AFTER_STREAM_MAX_ROWS, WARM_OF, decode_cold_rows, fit_after_stream, op_calibration


def test_rows_map_to_cold_kinds_with_the_stream_extra():
    rows = [{"op": "rmsnorm", "batch": 4, "hidden": 4096, "width": 4096, "bytes": 65536.0, "warm_s": 4.6e-6,
             "cold_s": 7.7e-6, "stream_s": 4.2e-5},
            {"op": "add", "batch": 4, "hidden": 4096, "width": 4096, "bytes": 98304.0, "warm_s": 1.5e-6,
             "cold_s": 1.8e-6, "stream_s": 4.2e-5},
            {"op": "rope", "batch": 4, "hidden": 4096, "width": 4096, "bytes": 65536.0, "warm_s": 1e-5,
             "cold_s": 1.2e-5, "stream_s": 4.2e-5},
            {"op": "rmsnorm", "batch": 256, "hidden": 8192, "width": 8192, "bytes": 1.0, "warm_s": 3.6e-6,
             "cold_s": -2e-7, "stream_s": 6e-5}]
    got = decode_cold_rows(rows)
    assert [(r["op"], r["tokens"], r["width"], r["rows"]) for r in got] == [
        ("rmsnorm_cold", 4, 4096, 4), ("residual_add_cold", 4, 4096, 4)]
    assert abs(got[0]["extra_s"] - 3.1e-6) < 1e-12 and abs(got[1]["extra_s"] - 0.3e-6) < 1e-12
    # RoPE and SwiGLU come from the rows that read what the stream just wrote; RoPE per head (head dim 128);
    # the large-row file names those fresh:<op>
    fresh = [{"op": "rope", "batch": 4, "hidden": 4096, "width": 4096, "bytes": 65536.0, "warm_s": 1.08e-5,
              "cold_s": 1.2e-5, "stream_s": 4.5e-5},
             {"op": "swiglu_chunked", "batch": 4, "hidden": 4096, "width": 14336, "bytes": 344064.0, "warm_s": 4.9e-6,
              "cold_s": 5.6e-6, "stream_s": 4.5e-5},
             {"op": "index_copy", "batch": 4, "hidden": 4096, "width": 1024, "bytes": 16384.0, "warm_s": 2.8e-6,
              "cold_s": 2.8e-6, "stream_s": 4.5e-5}]
    large = [dict(fresh[0], op="fresh:rope", batch=1024), dict(rows[0], batch=1024)]
    got = decode_cold_rows([], fresh, large)
    assert [(r["op"], r["tokens"], r["width"], r["rows"]) for r in got] == [
        ("rope_cold", 128, 128, 4), ("swiglu_chunked_cold", 4, 14336, 4), ("rmsnorm_cold", 1024, 4096, 1024),
        ("rope_cold", 32768, 128, 1024)]


def test_after_stream_fit_hand_checked():
    # extra = 1 us + 1 ns x width + 0.1 ps x elements on four shapes; a row above max_rows is left out of the fit
    rows = [{"op": "rmsnorm_cold", "width": w, "rows": n, "extra_s": 1e-6 + 1e-9 * w + 1e-13 * n * w}
            for (w, n) in ((1000, 4), (2000, 16), (4000, 4), (4000, 256))]
    rows.append({"op": "rmsnorm_cold", "width": 2000, "rows": 4096, "extra_s": 1.0})
    m = fit_after_stream(rows)["rmsnorm_cold"]
    assert abs(m.fixed_s - 1e-6) < 1e-12 and abs(m.per_width_s - 1e-9) < 1e-15 and abs(m.per_element_s - 1e-13) < 1e-18
    assert m.n_rows == 4
    assert abs(float(m(10, 3000)) - (1e-6 + 3e-6 + 3e-9)) < 1e-12 and float(m(AFTER_STREAM_MAX_ROWS + 1, 3000)) == 0.0


def test_h200_after_stream_adds_to_the_warm_kernel_at_decode_sizes():
    from c3kit.cost.opclass import ScaledCalibration

    cal = op_calibration("H200-SXM")
    assert set(cal.after_stream) == {"rmsnorm_cold", "residual_add_cold", "rope_cold", "swiglu_chunked_cold"}
    sc = ScaledCalibration(cal, 1.0, 1.0, cal.l2_bytes)
    for b in (1, 4, 16, 64):
        for H in (2048, 4096, 8192):
            assert float(sc.kind_time("rmsnorm_cold", b * H, H)) > float(sc.kind_time("rmsnorm", b * H, H))
    # a 4-row norm at hidden 4096: warm plus about the 3.1 us call 24 measured
    extra = float(sc.kind_time("rmsnorm_cold", 4 * 4096, 4096)) - float(sc.kind_time("rmsnorm", 4 * 4096, 4096))
    assert 2e-6 < extra < 4.5e-6


def test_cold_kinds_fall_back_to_their_warm_kernel():
    from dataclasses import replace

    from c3kit.cost.opclass import ScaledCalibration

    cal = op_calibration("H200-SXM")
    sc = ScaledCalibration(replace(cal, after_stream={}), 1.0, 1.0, cal.l2_bytes)
    for cold, warm in (("rmsnorm_cold", "rmsnorm"), ("residual_add_cold", "residual_add"), ("rope_cold", "rope"),
                       ("swiglu_chunked_cold", "swiglu_chunked")):
        assert WARM_OF[cold] == warm
        assert float(sc.kind_time(cold, 4 * 4096, 4096)) == float(sc.kind_time(warm, 4 * 4096, 4096))


def test_cold_kind_is_the_warm_kernel_above_the_measured_extra():
    from c3kit.cost.opclass import ScaledCalibration

    cal = op_calibration("H200-SXM")
    sc = ScaledCalibration(cal, 1.0, 1.0, cal.l2_bytes)
    for rows in (1, 16, 256, 1024, 4096, 32768):
        for H in (2048, 5120, 8192):
            for cold, warm in (("rmsnorm_cold", "rmsnorm"), ("residual_add_cold", "residual_add"),
                               ("rope_cold", "rope"), ("swiglu_chunked_cold", "swiglu_chunked")):
                c, w = float(sc.kind_time(cold, rows * H, H)), float(sc.kind_time(warm, rows * H, H))
                assert c >= w and (rows <= AFTER_STREAM_MAX_ROWS or c == w)
