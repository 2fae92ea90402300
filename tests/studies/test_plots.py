"""The studies' figures are readable: legends off the data, every axis labelled, full model names."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from c3kit.studies.all_studies import study_function  # noqa: E402


@pytest.fixture(scope="module", params=["dma", "t3", "c3", "ficco"])
def figures(request):
    kw = {"gpus": ("MI300X",)} if request.param == "c3" else {}
    res = study_function(request.param)(quick=True, **kw)
    built = [(name, build()) for name, build, _ in res.figures]
    yield res, built
    for _, fig in built:
        plt.close(fig)


def test_no_legend_over_the_data_and_every_axis_labelled(figures):
    _, built = figures
    assert built
    for name, fig in built:
        axes = [ax for ax in fig.axes if ax.get_visible()]
        for ax in axes:
            assert ax.get_legend() is None, f"{name}: a legend inside the axes"
            assert ax.get_xlabel(), f"{name}: x axis without a label"
        # shared y axes carry the label once per row: the leftmost axis of each row
        rows = {}
        for ax in axes:
            rows.setdefault(round(ax.get_position().y0, 3), []).append(ax)
        for row in rows.values():
            assert min(row, key=lambda a: a.get_position().x0).get_ylabel(), f"{name}: y axis without a label"
        if any(lab for ax in axes for lab in ax.get_legend_handles_labels()[1]):
            assert fig.legends, f"{name}: labelled data but no legend"


def test_t3_tick_labels_name_the_whole_model(figures):
    res, built = figures
    if res.name != "t3":
        pytest.skip("T3 only")
    df = res.tables["t3_sublayers"]
    for name, fig in built:
        ticks = [t.get_text() for t in fig.axes[0].get_xticklabels()]
        assert ticks == [f"{r.model} tp{r.tp} {r.sublayer}" for r in df.itertuples()], name


def test_fitted_curves_say_so_in_the_legend(figures):
    res, built = figures
    if res.name != "dma":
        pytest.skip("DMA only")
    for name, fig in built:
        if name in ("dma_share", "dma_speedup"):
            texts = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
            assert any("MI300X" in t and "fitted to these points" in t for t in texts), name


def test_validate_band_is_drawn_under_the_points(tmp_path, monkeypatch):
    from c3kit.cli import validate_cmd
    from c3kit.report import Report
    from c3kit.studies import validation as v

    seen = {}
    real = Report.figure

    def capture(self, name, fig, caption=""):
        if name != "signed_error":  # the breakdown bars are another figure
            return real(self, name, fig, caption)
        ax = fig.axes[0]
        seen["band"] = max(a.get_zorder() for a in [*ax.collections, *ax.patches] if a.get_label() == "+-10%")
        seen["points"] = min(c.get_zorder() for c in ax.collections if c.get_label() != "+-10%")
        seen["line"] = min(line.get_zorder() for line in ax.lines)
        return real(self, name, fig, caption)

    monkeypatch.setattr(Report, "figure", capture)
    runs = v.load_runs().head(3)
    validate_cmd.write_report(tmp_path / "val", v.validate(None, runs), runs, "efficiency")
    assert seen["band"] < seen["line"] < seen["points"]
