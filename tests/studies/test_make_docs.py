"""benchmarks/make_docs.py: every figure block in the docs has a generator, and the cheap ones are current."""

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def make_docs(load_benchmark):
    return load_benchmark("make_docs")


def test_every_marker_has_a_generator_and_every_generator_a_marker(make_docs):
    names = []
    for doc in make_docs.DOCS:
        found = make_docs.markers(doc.read_text())
        assert found, f"{doc.name} has no generated blocks"
        names += found
    assert len(names) == len(set(names))
    assert set(names) == set(make_docs.BLOCKS)


def test_dma_and_t3_blocks_in_the_docs_are_up_to_date(make_docs):
    # the DMA and T3 studies take well under a second: their blocks are checked against a fresh full run
    results = make_docs.compute(("dma", "t3"))
    for doc in make_docs.DOCS:
        _, changed = make_docs.render(doc.read_text(), results, ("dma", "t3"))
        assert changed == [], f"stale in {doc.name}: {changed}; run python benchmarks/make_docs.py"


def test_every_block_and_figure_renders_on_the_small_scenario_sets(make_docs, tmp_path):
    results = make_docs.compute(quick=True)
    written = make_docs.write_figures(results, tmp_path)
    assert sorted(p.name for p in written) == sorted(f"{n}.png" for ns in make_docs.FIGURES.values() for n in ns)
    assert all(p.stat().st_size > 1000 for p in written)
    studies = (make_docs.ROOT / "docs" / "studies.md").read_text()
    assert all(f"(figures/{p.name})" in studies and (make_docs.FIGURE_DIR / p.name).is_file() for p in written)
    for doc in make_docs.DOCS:
        text = doc.read_text()
        new, _ = make_docs.render(text, results)
        assert make_docs.markers(new) == make_docs.markers(text)
        for m in make_docs.BLOCK.finditer(new):
            assert m.group("body").strip(), m.group("name")
    assert "fitted to these points" in make_docs.c3_details(results)  # MI300X CU losses under the default fit
    assert "fitted to these points" in make_docs.dma_comparison(results)


def test_a_stale_block_is_reported_and_an_unknown_one_refused(make_docs):
    results = make_docs.compute(("dma",))
    text = "x\n<!-- generated:dma-vs-rccl -->\nold figures\n<!-- end generated:dma-vs-rccl -->\ny\n"
    new, changed = make_docs.render(text, results, ("dma",))
    assert changed == ["dma-vs-rccl"] and "predicted independently" in new and new.endswith("y\n")
    assert make_docs.render(new, results, ("dma",))[1] == []
    with pytest.raises(SystemExit, match="unknown generated block"):
        make_docs.render("<!-- generated:nope -->\n<!-- end generated:nope -->", results)
