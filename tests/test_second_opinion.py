"""A second opinion per page: the CPU engine reads each page too, in processes of its own, and
pages whose readings disagree (or differ in an article number, a number or a modal word) are
flagged for review in the result and the manifest."""

from __future__ import annotations

import json

from vlm_ocr import samples
from vlm_ocr.pipeline.compare import agree, critical_differences
from vlm_ocr.pipeline.textsim import similarity
from vlm_ocr_lab.standins.fakes import FakeEngine

from .support import make_settings, new_worker, pdf_job, run_job


def truth_engine(pages: list[list[str]], edits: dict[int, tuple[str, str]]) -> FakeEngine:
    """Answers each page (in order) with its true text, altered by `edits[n]` on page n."""
    answers = [samples.page_text(p) for p in pages]
    for n, (old, new) in edits.items():
        assert old in answers[n - 1]
        answers[n - 1] = answers[n - 1].replace(old, new)
    return FakeEngine(answers)


def test_a_changed_article_number_is_flagged_for_review(tmp_path, loop, cpu_pool) -> None:
    pages = samples.numbered_pages(3, lines=3, first=11)
    # Page 2 is read with 第13條 for 第12條: one character, a different article.
    engine = truth_engine(pages, {2: ("第12條", "第13條")})
    settings = make_settings(tmp_path, job_max_concurrent_pages=1)
    worker = new_worker(loop, settings, engine, cpu_pool)
    try:
        job = pdf_job(pages, "second/article") | {"second_opinion": True}
        result = run_job(loop, worker, job)
    finally:
        loop.run(worker.cpu_models.close())
    assert result.status == "ok"
    first, second, third = result.pages
    assert second.review is True and "article: 第13條 ≠ 第12條" in (second.differences or [])
    for page in (first, third):
        assert page.review is False and page.differences == [], page
        assert (page.agreement or 0) >= 0.9
    assert result.totals.review == 1
    assert any("pages 2 to review" in note for note in result.notes)
    manifest = json.loads((tmp_path / "out/second/article/manifest.json").read_text())
    assert manifest["pages"][1]["review"] is True
    assert manifest["pages"][1]["differences"] == second.differences
    # The CPU engine's reading is kept beside the page's text, for a person to compare.
    assert second.second_key == "second/article/page-0002.second.txt"
    assert manifest["pages"][1]["second_key"] == second.second_key
    cpu_reading = (tmp_path / "out" / second.second_key).read_text(encoding="utf-8")
    assert similarity(cpu_reading, samples.page_text(pages[1])) >= 0.9


def test_the_cpu_engine_against_itself_agrees(tmp_path, loop, cpu_engine, cpu_pool) -> None:
    # SECOND_OPINION sets the default; a job may still say no.
    settings = make_settings(tmp_path, second_opinion=True)
    worker = new_worker(loop, settings, cpu_engine, cpu_pool)
    try:
        pages = samples.numbered_pages(2, lines=2)
        result = run_job(loop, worker, pdf_job(pages, "second/self"))
        assert result.totals.review == 0
        assert all(p.agreement == 1.0 and p.review is False for p in result.pages)
        assert all(p.timings["second_opinion_wait_s"] >= 0 for p in result.pages)
        declined = run_job(loop, worker, pdf_job(pages, "second/no") | {"second_opinion": False})
        assert all(p.agreement is None for p in declined.pages)
    finally:
        loop.run(worker.cpu_models.close())


def test_critical_tokens_cover_numbers_dates_and_english_articles() -> None:
    a = "Article 12: the tenant shall pay 1,250.00 by 2024-05-01. 第3條 承租人應於113.5.1前給付。"
    b = "Article 13: the tenant shall pay 1,260.00 by 2024-05-07. 第3條 承租人得於113.5.1前給付。"
    found = {str(d) for d in critical_differences(a, b)}
    assert found == {
        "article: Article12 ≠ Article13",
        "number: 1,250.00 2024-05-01 ≠ 1,260.00 2024-05-07",
        "modal: 應 ≠ 得",
    }
    # Article numbers are not counted again as numbers; full-width digits read as digits.
    assert critical_differences("第１２條", "第12條") == []
    assert agree(a, a).agreement == 1.0 and not agree(a, a).needs_review(0.8)
    assert agree(a, b).needs_review(0.0)
