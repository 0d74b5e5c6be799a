"""Each page stage alone: a `PageWork` built by hand, one stage run on it, and what it set.

The stages get real parts where the worker has them (rendered PDF pages, the render processes,
the in-memory store, the scripted engine); the CPU engine's models are stood in for by a small
object that answers as `CpuModels` does, since orientation and the second reading themselves
are tested against the real models in test_orientation.py and test_second_opinion.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from vlm_ocr import samples
from vlm_ocr.blocks import RawBlock, place
from vlm_ocr.contract import JobInput
from vlm_ocr.engines.base import Recognition
from vlm_ocr.engines.rapidocr import SecondReading
from vlm_ocr.engines.reading import Reading
from vlm_ocr.errors import EngineError, JobStop, PageError, StorageError
from vlm_ocr.images import Budget, PageImage
from vlm_ocr.pipeline.render import pdf_page_image
from vlm_ocr.pipeline.rendering import Rendering
from vlm_ocr.pipeline.sources import PageRef
from vlm_ocr.pipeline.stages.fetch_render import FetchRender
from vlm_ocr.pipeline.stages.layout import Layout
from vlm_ocr.pipeline.stages.recognize import Recognize
from vlm_ocr.pipeline.stages.reuse import Reuse
from vlm_ocr.pipeline.stages.second_opinion import SecondOpinion
from vlm_ocr.pipeline.stages.store import StoreText
from vlm_ocr.pipeline.stages.upright import Upright
from vlm_ocr.pipeline.state import JobContext, PageWork
from vlm_ocr.prompts import resolve
from vlm_ocr.settings import RenderSettings
from vlm_ocr.storage import JobKeys, PageRecord
from vlm_ocr_lab.standins.fakes import FakeEngine, MemoryStore

from .support import TEST_PIXELS, b64, sideways_pdf

PAGE = ["Article 12", "The tenant pays the rent on the first day of each month."]


def rendered(paragraphs: list[str] = PAGE) -> PageImage:
    return pdf_page_image(samples.pdf_from_pages([paragraphs]), 1, Budget(TEST_PIXELS))


def scanned(image: PageImage) -> PageImage:
    """The same pixels, as a page whose text is only pixels (a scan)."""
    return PageImage(image.png, image.sha256, image.width, image.height, scanned=True)


def work(image: PageImage | None = None, **job: Any) -> PageWork:
    """Page 1 of a one-page job (`job`: JobContext fields), rendered as `image` when given."""
    source = rendered()

    async def fetch(ready: object) -> PageImage:
        return source

    raw = {"pdf": {"base64": b64(b"%PDF")}} | job.pop("input", {})
    context = JobContext(
        input=JobInput.parse(raw),
        keys=JobKeys("job"),
        prompt=job.pop("prompt", resolve(None, None, "markdown", None)),
        fingerprint_id="fp-1",
        second_opinion=job.pop("second_opinion", False),
        total=1,
        **job,
    )
    page = PageWork(PageRef(1, "doc.pdf", fetch), context)
    page.image = image
    return page


class Models:
    """Answers as `CpuModels` does: a turn for a scan, a second reading (or why none)."""

    def __init__(self, turn: int | None = None, reading: str | Exception = "") -> None:
        self.turn, self.reading = turn, reading
        self.asked: list[str] = []

    async def upright(self, image: PageImage, number: int) -> tuple[PageImage, int | None]:
        self.asked.append("upright")
        return image, self.turn

    async def read(self, image: PageImage) -> SecondReading | Exception:
        self.asked.append("read")
        if isinstance(self.reading, Exception):
            return self.reading
        return SecondReading(self.reading, self.reading)  # no headers or footers to leave out


@pytest.fixture
def rendering(cpu_pool) -> Rendering:
    return Rendering(cpu_pool, RenderSettings(max_pixels=TEST_PIXELS))


# --- fetch + render -----------------------------------------------------------------------------


def test_fetch_render_sets_the_image_and_keeps_it_for_a_searchable_pdf(loop, tmp_path) -> None:
    page = work(keep_images=tmp_path)
    loop.run(FetchRender().run(page))
    assert page.image is not None and page.image.sha256 == rendered().sha256
    assert (tmp_path / "page-0001.png").read_bytes() == page.image.png
    assert "render_s" in page.timings


def test_fetch_render_takes_no_page_once_the_store_has_failed(loop) -> None:
    page = work(stop=JobStop("store", "bucket gone"))
    with pytest.raises(PageError, match="the store failed earlier"):
        loop.run(FetchRender().run(page))
    assert page.image is None


# --- upright ------------------------------------------------------------------------------------


def test_upright_asks_only_for_scans_and_records_the_turn(loop, rendering) -> None:
    models = Models(turn=90)
    printed = work(rendered())
    loop.run(Upright(models, rendering, enabled=True).run(printed))  # type: ignore[arg-type]
    assert models.asked == [] and printed.turn is None  # its text layer reads across
    scan = work(scanned(rendered()))
    loop.run(Upright(models, rendering, enabled=False).run(scan))  # type: ignore[arg-type]
    assert models.asked == []
    loop.run(Upright(models, rendering, enabled=True).run(scan))  # type: ignore[arg-type]
    assert models.asked == ["upright"] and scan.turn == 90 and "orient_s" in scan.timings


def test_a_page_whose_text_layer_runs_sideways_is_turned_as_it_says(loop, rendering) -> None:
    models = Models(turn=180)  # never asked: the text layer tells
    image = pdf_page_image(sideways_pdf([90]), 1, Budget(TEST_PIXELS))
    assert image.text_turn == 90 and not image.scanned
    off = work(image)
    loop.run(Upright(models, rendering, enabled=False).run(off))  # type: ignore[arg-type]
    assert off.turn is None and off.image is image
    page = work(image)
    loop.run(Upright(models, rendering, enabled=True).run(page))  # type: ignore[arg-type]
    assert models.asked == [] and page.turn == 90 and "orient_s" in page.timings
    assert page.image is not None and page.image.text_turn == 0  # upright now
    assert (page.image.width, page.image.height) == (image.height, image.width)
    assert page.image.pdf_size == (842, 595) and page.image.sha256 != image.sha256


# --- reuse --------------------------------------------------------------------------------------


def test_reuse_finds_the_text_stored_for_the_same_pixels_and_fingerprint(loop) -> None:
    store = MemoryStore()
    page = work(rendered(), input={"return_text": True})
    assert page.image is not None
    key = page.job.keys.page(1)
    store.objects[key] = b"stored text"
    store.records[key] = PageRecord("other pixels", "fp-1", 11)
    loop.run(Reuse(store).run(page))  # type: ignore[arg-type]
    assert page.stored is None and page.needs_engine
    store.records[key] = PageRecord(page.image.sha256, "fp-1", 11, blocks=3)
    loop.run(Reuse(store).run(page))  # type: ignore[arg-type]
    assert page.stored is not None and page.key == key and not page.needs_engine
    assert (page.stored.text, page.stored.blocks) == ("stored text", 3)


def test_reuse_stops_the_job_when_the_store_cannot_be_read(loop) -> None:
    class Unreadable(MemoryStore):
        async def record(self, key: str) -> PageRecord | None:
            raise StorageError(f"HEAD {key}: access denied")

    with pytest.raises(PageError) as failed:
        loop.run(Reuse(Unreadable()).run(work(rendered())))  # type: ignore[arg-type]
    assert failed.value.stage == "store" and failed.value.stop is not None


# --- recognize ----------------------------------------------------------------------------------


def test_recognize_reads_the_page_through_the_gate(loop, rendering) -> None:
    engine = FakeEngine(["the page's text"])
    page = work(rendered())
    loop.run(Recognize(engine, asyncio.Semaphore(1), rendering).run(page))
    assert page.recognition is not None and page.recognition.text == "the page's text"
    assert page.read_image is page.image and page.turn is None
    assert {"queue_s", "engine_s"} <= set(page.timings)
    blank = work(rendered([]))
    assert blank.blank
    loop.run(Recognize(engine, asyncio.Semaphore(1), rendering).run(blank))
    assert blank.recognition is None and engine.calls == 1  # no ink: no engine


def test_recognize_turns_a_page_the_model_says_lies_turned_and_reads_it_again(
    loop, rendering
) -> None:
    turned = Recognition("sideways", attempts=2, output_tokens=5, reading=Reading("x", turn=90))
    engine = FakeEngine([turned, Recognition("upright", output_tokens=7)])
    page = work(rendered())
    assert page.image is not None
    loop.run(Recognize(engine, asyncio.Semaphore(1), rendering).run(page))
    rec = page.recognition
    assert rec is not None and rec.text == "upright" and page.turn == 90
    assert (rec.attempts, rec.output_tokens) == (3, 12)  # the first reading's cost counts
    assert page.read_image is not None and page.read_image.width == page.image.height


def test_recognize_a_dead_engine_stops_the_job(loop, rendering) -> None:
    engine = FakeEngine([EngineError("the server exited", fatal=True)])
    with pytest.raises(PageError) as failed:
        loop.run(Recognize(engine, asyncio.Semaphore(1), rendering).run(work(rendered())))
    assert failed.value.stage == "engine" and failed.value.stop is not None


# --- layout -------------------------------------------------------------------------------------


def read_as_blocks(page: PageWork) -> None:
    """A recognition with a title, a paragraph and a figure, in the page's pixels."""
    image = page.image
    assert image is not None
    w, h = image.width, image.height
    raw = [
        RawBlock("title", (0.1 * w, 0.05 * h, 0.9 * w, 0.1 * h), "# Article 12"),
        RawBlock("text", (0.1 * w, 0.12 * h, 0.9 * w, 0.3 * h), "The tenant pays."),
        RawBlock("figure", (0.2 * w, 0.4 * h, 0.8 * w, 0.7 * h), "A floor plan"),
    ]
    labels = {"title": "title", "text": "text", "figure": "figure"}
    blocks = tuple(place(raw, labels, width=w, height=h, pdf_size=image.pdf_size).blocks)
    page.recognition = Recognition("unused", reading=Reading("unused", blocks))


def test_layout_places_the_blocks_cuts_the_figures_and_writes_markdown(loop, rendering) -> None:
    page = work(rendered())
    read_as_blocks(page)
    loop.run(Layout(rendering, "chandra").run(page))
    layout = page.layout
    assert layout is not None and layout.doc.source == "chandra" and layout.doc.labelled
    assert all(b.box_pt is not None for b in layout.doc.blocks)  # also in the PDF's points
    assert [f.name for f in layout.figures] == ["page-0001-figure-1.png"]
    assert layout.figures[0].png.startswith(b"\x89PNG")
    assert layout.text.startswith("# Article 12") and "page-0001-figure-1.png" in layout.text


def test_layout_leaves_a_page_without_blocks_and_a_json_page_alone(loop, rendering) -> None:
    plain = work(rendered())
    plain.recognition = Recognition("just text", reading=Reading("just text"))
    loop.run(Layout(rendering, "qwen-vl").run(plain))
    assert plain.layout is None
    schema = resolve(None, None, "markdown", {"type": "object"})
    extracted = work(rendered(), prompt=schema)
    read_as_blocks(extracted)
    loop.run(Layout(rendering, "qwen-vl").run(extracted))
    assert extracted.layout is None


# --- store --------------------------------------------------------------------------------------


def test_store_writes_the_text_with_its_record_and_keeps_its_edges(loop) -> None:
    store = MemoryStore()
    page = work(rendered())
    assert page.image is not None
    text = "Lease\n\nThe tenant pays.\n\n3"
    page.recognition = Recognition(text)
    loop.run(StoreText(store).run(page))  # type: ignore[arg-type]
    assert page.key == "job/page-0001.md" and store.objects[page.key] == text.encode()
    record = store.records[page.key]
    assert (record.image_sha256, record.fingerprint, record.chars) == (
        page.image.sha256,
        "fp-1",
        len(text),
    )
    assert page.job.edges[1].top[0] == "Lease" and page.job.edges[1].bottom[-1] == "3"


def test_store_keeps_a_failed_pages_partial_text_apart(loop) -> None:
    store = MemoryStore()
    page = work(rendered())
    page.recognition = Recognition("half a page", ok=False, finish_reason="length")
    with pytest.raises(PageError, match="stopped by length"):
        loop.run(StoreText(store).run(page))  # type: ignore[arg-type]
    assert page.partial_key == "job/failed/page-0001.partial.md" and page.key is None
    assert store.objects[page.partial_key] == b"half a page" and not store.records


def test_store_a_failed_put_stops_the_job(loop) -> None:
    page = work(rendered())
    page.recognition = Recognition("text")
    with pytest.raises(PageError) as failed:
        loop.run(StoreText(MemoryStore(fail=(".md",))).run(page))  # type: ignore[arg-type]
    assert failed.value.stage == "store" and failed.value.stop is not None and page.key is None


# --- second opinion -----------------------------------------------------------------------------


def test_second_opinion_reads_beside_the_engine_and_flags_a_difference(loop) -> None:
    async def judged(page: PageWork, stage: SecondOpinion) -> None:
        stage.begin(page)
        page.recognition = Recognition("第12條 租金每月一日支付。")
        await stage.judge(page)
        stage.cancel(page)

    models = Models(reading="第13條 租金每月一日支付。")
    store = MemoryStore()
    stage = SecondOpinion(models, store, min_agreement=0.8)  # type: ignore[arg-type]
    asked = work(rendered(), second_opinion=True)
    loop.run(judged(asked, stage))
    assert asked.opinion is not None and asked.opinion.review
    assert any("第13條" in d for d in asked.opinion.differences)
    # the CPU engine's reading is kept beside the page, for a person to compare
    assert asked.opinion.key is not None
    assert store.objects[asked.opinion.key].decode() == "第13條 租金每月一日支付。"
    not_asked = work(rendered())
    loop.run(judged(not_asked, stage))
    assert not_asked.opinion is None and models.asked == ["read"]


def test_second_opinion_without_a_reading_says_why(loop) -> None:
    async def judged(page: PageWork, stage: SecondOpinion) -> None:
        stage.begin(page)
        page.recognition = Recognition("the text")
        await stage.judge(page)

    no_reading = Models(reading=TimeoutError("ran over"))
    stage = SecondOpinion(no_reading, MemoryStore(), min_agreement=0.8)  # type: ignore[arg-type]
    page = work(rendered(), second_opinion=True)
    loop.run(judged(page, stage))
    assert page.opinion is not None and page.opinion.review and page.opinion.agreement is None
    assert page.opinion.differences == ["no second opinion: ran over"]


def test_every_stage_has_a_test_here() -> None:
    """A new stage module gets its test in this file too."""
    stages = Path(__file__).resolve().parents[1] / "src/vlm_ocr/pipeline/stages"
    names = {p.stem for p in stages.glob("*.py") if p.stem != "__init__"}
    tested = Path(__file__).read_text()
    missing = [n for n in names if f"vlm_ocr.pipeline.stages.{n} import" not in tested]
    assert not missing
