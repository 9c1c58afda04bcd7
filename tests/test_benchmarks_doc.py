"""docs/BENCHMARKS.md reads as a page, not a lab notebook: it opens with the summary of its
headline figures, made from the sections as they stand (so it cannot drift from them), every
headline is found in its section, and its prose is wrapped (no line a reader scrolls for)."""

from __future__ import annotations

from benchmarks.report import BENCHMARKS_MD
from benchmarks.summary import HEADLINES, missing, render, sections, with_summary


def test_the_summary_is_made_from_the_sections_as_they_stand() -> None:
    text = BENCHMARKS_MD.read_text()
    assert text.index("<!-- BEGIN summary -->") < text.index("<!-- BEGIN optimizer -->")
    assert with_summary(text) == text, "run `python -m benchmarks.summary`"
    assert missing(text) == []


def test_each_headline_links_to_the_section_it_reads() -> None:
    text = BENCHMARKS_MD.read_text()
    summary, found = render(text), sections(text)
    for i, h in enumerate(HEADLINES, 1):
        heading = next(line for line in found[h.section].splitlines() if line.startswith("## "))
        slug = heading[3:].lower().replace(" ", "-")
        assert f"[{i}]: #{''.join(c for c in slug if c.isalnum() or c in '-_')}" in summary


def test_a_headline_gone_from_its_section_shows_as_missing() -> None:
    text = BENCHMARKS_MD.read_text().replace("| leave one cluster out | gbm |", "| gone | gbm |")
    assert any("scaling, a cluster never seen" in gone for gone in missing(text))
    assert "| missing |" in render(text)


def test_no_prose_line_is_longer_than_a_page_is_wide() -> None:
    long = [
        line[:60]
        for line in BENCHMARKS_MD.read_text().splitlines()
        if len(line) > 200 and not line.startswith("|")
    ]
    assert long == []


def test_a_long_list_item_keeps_one_bullet_when_wrapped() -> None:
    from benchmarks.summary import WIDTH, wrap_prose

    item = "- 150 s: HyperSched minus ASHA, per seed: " + ", ".join(["+0.007"] * 12)
    wrapped = wrap_prose(item).splitlines()
    assert len(wrapped) == 2 and max(len(line) for line in wrapped) <= WIDTH
    assert wrapped[0].startswith("- 150 s:") and wrapped[1].startswith("  +0.007")
    assert " ".join(line.strip() for line in wrapped) == item
