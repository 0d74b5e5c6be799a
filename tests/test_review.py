"""`vlm-ocr review`: the review page of a real job's stored results (the worker on the CPU engine,
with a second opinion), written as a user writes it and looked at in a real browser (headless
Chromium): the pictures and boxes where they belong, a block's text beside the page on hover and
click, the readings' differing words marked, and nothing a model wrote able to run."""

from __future__ import annotations

import base64
import io
import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

import pymupdf
import pytest
from PIL import Image

from vlm_ocr import samples
from vlm_ocr.cli.review.words import marked
from vlm_ocr.cli.show import COLOURS
from vlm_ocr.contract import JobResult, PageReport, format_ranges
from vlm_ocr.engines.base import Recognition
from vlm_ocr.engines.families import Chandra, Page
from vlm_ocr.images import PageImage
from vlm_ocr.prompts import Prompt
from vlm_ocr_lab.standins.fakes import FakeEngine
from vlm_ocr_lab.standins.local_endpoint import worker_environ
from vlm_ocr_lab.standins.loopback_s3 import LoopbackS3, s3_client

from .support import b64, make_settings, new_worker, page_image, pdf_job, png_bytes, run_job
from .support.browser import Browser

NOTICE = [
    "Notice 7: an answer that carries markup.",
    "The model's answer for this page holds a script, an image with an error handler and a "
    "javascript: link; the review page must show them as text and run none of them.",
    "Its table cell tries the same.",
]
PAGES = [samples.LEGAL_PAGES[0], samples.LEGAL_PAGES[1], NOTICE]
# What a script of the model's would do if it ran: mark the window, paint the page magenta.
RUN = "window.pwned = {n}; document.body.style.background = 'rgb(255, 0, 255)'"
HOSTILE_TEXT = (
    f"&lt;script&gt;{RUN.format(n=1)}&lt;/script&gt; and "
    f'&lt;img src=x onerror="{RUN.format(n=2)}"&gt; are text here.'
)
HOSTILE_TABLE = (
    f'<table><tr><th onmouseover="{RUN.format(n=3)}">Cell</th><td>'
    f'<img src="x" onerror="{RUN.format(n=4)}"><a href="javascript:{RUN.format(n=5)}">a link</a>'
    f'<script>{RUN.format(n=6)}</script><a href="https://example.com/terms">terms</a></td></tr>'
    "</table>"
)
MAGENTA = (255, 0, 255)
KEPT = (255, 179, 0)  # a block clicked to keep its text: its outline (review.css, --kept)


def layout_answer(pdf: pymupdf.Document, number: int, contents: list[tuple[str, str]]) -> str:
    """A layout model's answer (Chandra's format) for a page: one block per text block of the
    PDF page, where it is printed, with `contents` (label, HTML) in their order."""
    page = pdf[number - 1]
    width, height = page.rect.width, page.rect.height
    divs = []
    for (x0, y0, x1, y1, *_), (label, html) in zip(page.get_text("blocks"), contents, strict=True):
        grid = [round(1000 * x0 / width), round(1000 * y0 / height)]
        grid += [round(1000 * x1 / width), round(1000 * y1 / height)]
        divs.append(
            f'<div data-bbox="{" ".join(map(str, grid))}" data-label="{label}">{html}</div>'
        )
    return "\n".join(divs)


def scripted_engine(pdf_bytes: bytes, cpu_engine: object) -> FakeEngine:
    """Page 1 as the CPU engine reads it; page 2 read as a layout model would, with 得 (may)
    turned into 應 (shall); page 3 a hostile answer."""
    with pymupdf.open(stream=pdf_bytes) as pdf:
        misread = [p.replace("出租人得於", "出租人應於") for p in samples.LEGAL_PAGES[1]]
        lease = [("Text", f"<p>{p}</p>") for p in misread]
        notice = [("Section-Header", "<h2>Notice 7</h2>"), ("Text", f"<p>{HOSTILE_TEXT}</p>")]
        notice.append(("Table", HOSTILE_TABLE))
        answers = {
            "第四條": layout_answer(pdf, 2, lease),
            "Notice 7": layout_answer(pdf, 3, notice),
        }

    def answer(page: PageImage, prompt: Prompt) -> Recognition | None:
        for marker, text in answers.items():
            if marker in (page.text_layer or ""):
                size = Page(page.width, page.height, page.pdf_size)
                reading = Chandra().parse(text, Chandra.prompt, size)  # type: ignore[arg-type]
                return Recognition(reading.text, finish_reason="stop", reading=reading)
        return None  # the CPU engine reads it

    return FakeEngine(answer, wraps=cpu_engine)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Job:
    pdf: Path
    folder: Path  # the job's own folder, holding its manifest


@pytest.fixture(scope="module")
def job(tmp_path_factory, loop, cpu_engine, cpu_pool) -> Job:
    """The three pages read by the worker, with a second opinion on each, stored in a folder."""
    tmp = tmp_path_factory.mktemp("review")
    pdf = tmp / "lease and notice.pdf"
    pdf.write_bytes(samples.pdf_from_pages(PAGES))
    settings = make_settings(tmp, second_opinion=True)
    worker = new_worker(loop, settings, scripted_engine(pdf.read_bytes(), cpu_engine), cpu_pool)
    try:
        job = {"pdf": {"base64": b64(pdf.read_bytes()), "name": pdf.name}}
        result = run_job(loop, worker, job | {"output_prefix": "cases/7"})
    finally:
        loop.run(worker.cpu_models.close())
    assert result.status == "ok", result.error
    assert [p.review for p in result.pages] == [False, True, True], result.pages
    assert "modal: 應 ≠ 得" in (result.pages[1].differences or [])
    return Job(pdf, tmp / "out/cases/7")


def review(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vlm_ocr", "review", *args],
        cwd=cwd,
        env=worker_environ(**env),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def page(job: Job) -> Path:
    """The review page, written as a user writes it."""
    out = job.folder.parent / "review.html"
    proc = review(str(job.folder), "--pdf", str(job.pdf), "-o", str(out), cwd=job.folder.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "3 of 3 pages shown (2 needing attention)" in proc.stdout
    return out


class Parsed(HTMLParser):
    """Every element and attribute of a page, those inside <template>s too."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.elements.append((tag, {k: v or "" for k, v in attrs}))


def test_the_page_holds_what_the_model_wrote_as_text_and_nothing_that_runs(page: Path) -> None:
    html = page.read_text(encoding="utf-8")
    parsed = Parsed()
    parsed.feed(html)
    tags = [tag for tag, _ in parsed.elements]
    assert tags.count("script") == 1  # the page's own
    for tag, attrs in parsed.elements:
        assert not [a for a in attrs if a.startswith("on")], (tag, attrs)
        assert not any(v.strip().lower().startswith("javascript:") for v in attrs.values())
        if tag == "img":
            assert attrs["src"].startswith("data:image/jpeg;base64,"), attrs  # nothing to fetch
    # The model's markup is there to read, escaped; its table rendered without what runs.
    assert "&lt;script&gt;window.pwned = 1;" in html
    assert (
        '<a href="https://example.com/terms" rel="noopener noreferrer nofollow">terms</a>' in html
    )
    # One file: no address outside it but the link the model's table gave (and shows as text).
    assert html.count("https://") == html.count("https://example.com/terms")
    policy = next(a["content"] for t, a in parsed.elements if a.get("http-equiv"))
    assert "default-src 'none'" in policy and "script-src 'sha256-" in policy


@pytest.fixture(scope="module")
def browser(tmp_path_factory) -> Iterator[Browser]:
    b = Browser(tmp_path_factory.mktemp("browser"))
    yield b
    b.close()


RECTS = """JSON.stringify([...document.querySelectorAll('#page-P .sheet img, #page-P .box')]
  .map(e => { const r = e.getBoundingClientRect();
              return [e.className, r.left, r.top, r.right, r.bottom]; }))"""


def rects(browser: Browser, page: int) -> list[tuple[str, float, float, float, float]]:
    return [tuple(r) for r in json.loads(browser.evaluate(RECTS.replace("P", str(page))))]


def near(pixel: tuple[int, ...], colour: tuple[int, ...], by: int = 40) -> bool:
    return all(abs(a - b) <= by for a, b in zip(pixel, colour, strict=False))


def test_a_person_sees_the_flagged_pages_first_with_their_blocks(
    page: Path, browser: Browser
) -> None:
    browser.open(page)
    assert browser.evaluate("document.documentElement.classList.contains('js')")  # it ran
    order = browser.evaluate("[...document.querySelectorAll('article')].map(a => a.id).join()")
    assert order == "page-2,page-3,page-1"  # both to review (second opinion), then the rest
    shot = browser.screenshot()
    (img, *boxes) = rects(browser, 2)
    assert img[0] == "" and len(boxes) == 4
    # The page's picture is there: paper, and the ink of its text inside the first block.
    left, top, right, bottom = (round(v) for v in img[1:])
    assert near(shot.getpixel((left + 3, bottom - 3)), (255, 255, 255), by=8)
    x0, y0, x1, y1 = (round(v) for v in boxes[0][1:])
    inside = shot.crop((x0 + 3, y0 + 3, x1 - 3, y1 - 3)).convert("L")
    assert inside.getextrema()[0] < 100  # the printed text, under the box
    # Each block's box is drawn where its block is, in the colour of its kind.
    for cls, bx0, by0, bx1, by1 in boxes:
        assert cls == "box k-text"
        assert left <= bx0 < bx1 <= right and top <= by0 < by1 <= bottom
        edge = [shot.getpixel((int(bx0) + dx, round((by0 + by1) / 2))) for dx in (0, 1, 2)]
        assert any(near(p, COLOURS["text"]) for p in edge), edge
    assert not any(near(p, MAGENTA, by=10) for p in shot.getdata())  # no script of the model's
    assert browser.evaluate("typeof window.pwned") == "undefined"


def centre(rect: tuple[str, float, float, float, float]) -> tuple[float, float]:
    return (rect[1] + rect[3]) / 2, (rect[2] + rect[4]) / 2


def block_view(browser: Browser, page: int) -> str:
    return browser.evaluate(f"document.querySelector('#page-{page} .block-view').innerText")


def test_pointing_at_a_block_shows_its_text_and_clicking_keeps_it(
    page: Path, browser: Browser, tmp_path_factory
) -> None:
    browser.open(page)
    _, header, text, table = rects(browser, 3)
    browser.point(*centre(text))
    assert "<script>window.pwned = 1;" in block_view(browser, 3)  # shown as the model wrote it
    browser.click(*centre(table))
    browser.point(*centre(header))  # a kept block stays while the pointer moves on
    assert "Cell" in block_view(browser, 3) and "a link" in block_view(browser, 3)
    link = browser.evaluate(
        "JSON.stringify([...document.querySelectorAll('#page-3 .block-view a')]"
        ".map(a => [a.getAttribute('href'), a.getBoundingClientRect().x + 2,"
        " a.getBoundingClientRect().y + 2]))"
    )
    (dead, x, y), (terms, *_) = json.loads(link)
    assert dead is None and terms == "https://example.com/terms"
    browser.click(x, y)  # the javascript: link, without its address
    assert browser.evaluate("typeof window.pwned") == "undefined"
    assert browser.evaluate("location.href") == page.resolve().as_uri()
    # Page 2's second block is the one its model misread; click it and the outline says so.
    _, _, misread, *_ = rects(browser, 2)
    browser.click(*centre(misread))
    assert "第五條 出租人應於" in block_view(browser, 2)
    shot = browser.screenshot()
    shot.save(tmp_path_factory.getbasetemp() / "review.png")  # docs/review.png is its top
    x0, y0, _, y1 = misread[1:]
    assert near(shot.getpixel((round(x0) - 3, round((y0 + y1) / 2))), KEPT)
    # Both readings, their differing words marked: the engine's 應 against the CPU engine's 得.
    marks = browser.evaluate(
        "[...document.querySelectorAll('#page-2 .readings > div')]"
        ".map(d => [...d.querySelectorAll('mark')].map(m => m.innerText).join('|'))"
    )
    assert "應" in marks[0].split("|") and "得" in marks[1].split("|"), marks
    assert not [m for m in browser.logged() if "Content Security Policy" in m]


def test_a_large_job_is_cut_to_the_size_asked_for_saying_what_is_left_out(job: Job) -> None:
    out = job.folder.parent / "small.html"
    args = [str(job.folder), "--pdf", str(job.pdf), "-o", str(out)]
    proc = review(*args, "--max-mb", "0.05", cwd=job.folder.parent)  # a page's picture is ~30 KB
    assert proc.returncode == 0, proc.stderr[-3000:]
    html = out.read_text(encoding="utf-8")
    assert len(html.encode()) <= 50_000
    shown = [int(n) for n in re.findall(r'<article [^>]*id="page-(\d+)"', html)]
    assert 1 <= len(shown) < 3 and shown == [2, 3, 1][: len(shown)]  # the flagged ones first
    left = format_ranges(sorted({1, 2, 3} - set(shown)))
    said = f"Not shown: pages {left} ({3 - len(shown)}), past the size limit of 0.05 MB"
    assert said in html and said in proc.stdout
    proc = review(*args, "--pages", "1", cwd=job.folder.parent)
    assert "1 of 3 pages shown (0 needing attention)" in proc.stdout
    proc = review(*args, "--pages", "9", cwd=job.folder.parent)
    assert (
        proc.returncode == 2 and "--pages: 9: the job has no such page (it has 1-3)" in proc.stderr
    )
    # Without the document the worker does not keep, the blocks are drawn on a blank sheet.
    proc = review(str(job.folder), "-o", str(out), cwd=job.folder.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (
        "no page pictures: the job read lease and notice.pdf, and the worker keeps no copy of a "
        "job's input; give the file it read: --pdf FILE"
    ) in proc.stdout
    assert "<img" not in out.read_text(encoding="utf-8")


def test_a_revised_pdf_of_the_same_name_and_size_is_drawn_with_a_doubt_on_each_page(
    job: Job, page: Path
) -> None:
    # The job's own PDF: no doubt of any page (the review page of the fixture).
    assert "may not be the page the job read" not in page.read_text(encoding="utf-8")
    # The same name and page size, its pages in another order: each page's words elsewhere
    # (page 3's scripted answer has too few words, its markup aside, to tell by).
    revised = job.folder.parent / "revised" / job.pdf.name
    revised.parent.mkdir()
    revised.write_bytes(samples.pdf_from_pages([PAGES[1], PAGES[2], PAGES[0]]))
    out = job.folder.parent / "revised.html"
    proc = review(str(job.folder), "--pdf", str(revised), "-o", str(out), cwd=job.folder.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (
        "pages 1-2: the words the job read are mostly not in the given PDF's pages (each says "
        "so): is it the document the job read?"
    ) in proc.stdout
    html = out.read_text(encoding="utf-8")
    doubts = re.findall(
        r"<li>Picture: page (\d) of lease and notice.pdf may not be the page the job read: of "
        r"the (\d+) words the job read on it, (\d+) are in that page&#x27;s own text",
        html,
    )
    assert sorted(int(n) for n, _, _ in doubts) == [1, 2], doubts
    assert all(int(shared) < int(read) / 2 for _, read, shared in doubts)
    assert html.count("<img") == 3  # only a doubt: the pictures are still drawn


def test_an_images_job_finds_each_picture_by_the_name_the_job_gave_it(tmp_path: Path, run) -> None:
    folder = tmp_path / "scans"
    folder.mkdir()
    wide = page_image(["A page scanned sideways."]).resize((1000, 700))
    tall = page_image(["A page scanned upright."])
    (folder / "b-wide.png").write_bytes(png_bytes(wide))
    (folder / "a-tall.png").write_bytes(png_bytes(tall))
    images = [
        {"base64": b64(png_bytes(i)), "name": n}
        for i, n in ((wide, "b-wide.png"), (tall, "a-tall.png"))
    ]
    result = run({"images": images, "output_prefix": "scans"})
    assert result.status == "ok", result.error
    proc = review("out/scans", "--images", str(folder), "-o", "scans.html", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"page pictures from the images in {folder}" in proc.stdout
    html = (tmp_path / "scans.html").read_text(encoding="utf-8")
    for number, (width, height) in ((1, wide.size), (2, tall.size)):
        article = html[html.index(f'id="page-{number}"') :]
        data = re.search(r'src="data:image/jpeg;base64,([^"]+)"', article)
        assert data is not None
        with Image.open(io.BytesIO(base64.b64decode(data.group(1)))) as picture:
            assert abs(picture.width / picture.height - width / height) < 0.02, number


def picture_of(html: str, page: int) -> tuple[str | None, str]:
    """Page `page`'s picture (its base64 JPEG) in a review page, or None, and what it says."""
    start = html.index(f'id="page-{page}"')
    article = html[start : html.index("</article>", start)]
    data = re.search(r'src="data:image/jpeg;base64,([^"]+)"', article)
    return (data.group(1) if data else None), article


def test_a_picture_lands_on_the_page_the_job_read_it_for_never_by_its_place(
    tmp_path: Path, run
) -> None:
    folder = tmp_path / "scans"
    folder.mkdir()
    third = page_image(["The third image, the only one the worker could read."])
    (folder / "c.png").write_bytes(png_bytes(third))  # the folder's one picture
    unreadable = b64(b"these bytes are no image")
    named = [
        {"base64": unreadable, "name": "a.png"},
        {"base64": unreadable, "name": "b.png"},
        {"base64": b64(png_bytes(third)), "name": "c.png"},
    ]
    result = run({"images": named, "output_prefix": "three"})
    assert [p.status for p in result.pages] == ["failed", "failed", "ok"], result.pages
    proc = review("out/three", "--images", str(folder), "-o", "three.html", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    html = (tmp_path / "three.html").read_text(encoding="utf-8")
    (first, said_1), (second, said_2), (picture, _) = (picture_of(html, n) for n in (1, 2, 3))
    assert first is None and second is None and picture is not None
    with Image.open(io.BytesIO(base64.b64decode(picture))) as shown:
        assert abs(shown.width / shown.height - third.width / third.height) < 0.02
    assert f"no picture: {folder} has no a.png, the file the job read as page 1" in said_1
    assert "has no b.png" in said_2
    # The same images sent without names: nothing tells which is which, so no page gets the
    # folder's picture, and each page says why.
    unnamed = [{"base64": source["base64"]} for source in named]
    result = run({"images": unnamed, "output_prefix": "unnamed"}, "job-2")
    assert [p.source for p in result.pages] == ["base64"] * 3
    proc = review("out/unnamed", "--images", str(folder), "-o", "unnamed.html", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    html = (tmp_path / "unnamed.html").read_text(encoding="utf-8")
    assert "<img" not in html
    for n in (1, 2, 3):
        assert f"the job recorded no file name for page {n}" in picture_of(html, n)[1]


def test_a_page_whose_stored_files_are_gone_is_shown_as_needing_attention_saying_why(
    tmp_path: Path, run
) -> None:
    result = run(pdf_job([samples.LEGAL_PAGES[0], samples.LEGAL_PAGES[1]], "gone"))
    assert [p.status for p in result.pages] == ["ok", "ok"], result.pages
    for name in ("page-0001.md", "page-0001.json"):  # deleted after the job
        (tmp_path / "out/gone" / name).unlink()
    proc = review("out/gone", "-o", "gone.html", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "2 of 2 pages shown (1 needing attention)" in proc.stdout
    assert (
        "page 1: a file the job stored for it is missing or cannot be read (its section says which)"
    ) in proc.stdout
    html = (tmp_path / "gone.html").read_text(encoding="utf-8")
    first = html.index("<article ")  # shown first, under its heading, flagged
    assert html[:first].endswith("<h2>Needs attention (1)</h2>")
    assert html[first:].startswith('<article class="page attention missing" id="page-1"')
    _, article = picture_of(html, 1)
    assert '<span class="flag missing"' in article
    assert "its text (gone/page-0001.md) could not be read: no page-0001.md under" in article
    assert "its blocks (gone/page-0001.json) could not be read" in article
    assert 'class="missing" href="#page-1"' in html  # its chip in the index


@pytest.fixture(scope="module")
def s3() -> Iterator[LoopbackS3]:
    server = LoopbackS3()
    yield server
    server.stop()


def test_a_job_in_the_bucket_is_reviewed_with_its_input_from_the_bucket(
    tmp_path: Path, s3: LoopbackS3, loop, cpu_engine, cpu_pool
) -> None:
    bucket = s3.create_bucket(f"ocr-{uuid.uuid4().hex[:12]}")
    pdf = samples.pdf_from_pages(PAGES[:2])
    s3_client(s3.endpoint).put_object(Bucket=bucket, Key="uploads/lease.pdf", Body=pdf)
    where = s3.settings_update(bucket) | {"bucket_prefix": "ocr"}
    worker = new_worker(loop, make_settings(**where), FakeEngine(wraps=cpu_engine), cpu_pool)
    result = run_job(loop, worker, {"pdf": {"key": "uploads/lease.pdf"}, "output_prefix": "l/1"})
    assert result.status == "ok" and result.manifest_key == "ocr/l/1/manifest.json"
    env = {k.upper(): str(v) for k, v in where.items()}
    proc = review("l/1", "-o", "bucket.html", cwd=tmp_path, **env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"page pictures from s3://{bucket}/uploads/lease.pdf" in proc.stdout
    html = (tmp_path / "bucket.html").read_text(encoding="utf-8")
    assert html.count('<img src="data:image/jpeg;base64,') == 2
    proc = review("l/none", "-o", "x.html", cwd=tmp_path, **env)
    assert proc.returncode == 2 and f"no job manifest at s3://{bucket}/ocr/l/none/" in proc.stderr


def test_the_readings_words_that_differ_are_marked() -> None:
    a, b, compared = marked("## 第五條 出租人**應**於 <b>x</b> 12.5", "第五條 出租人得於\nx 13.5")
    assert compared
    assert a == "## 第五條 出租人**<mark>應</mark>**於 &lt;b&gt;x&lt;/b&gt; <mark>12.5</mark>"
    assert b == "第五條 出租人<mark>得</mark>於\nx <mark>13.5</mark>"
    assert marked("Same, words.", "same words")[:2] == ("Same, words.", "same words")


def test_a_browser_that_is_missing_fails_the_suite_saying_how_to_install_it(monkeypatch) -> None:
    from .support import browser as browser_support

    monkeypatch.setattr(browser_support.shutil, "which", lambda name: None)
    with pytest.raises(pytest.fail.Exception, match="apt-get install -y chromium-headless-shell"):
        browser_support.browser_path()


def test_a_bucket_prefix_is_found_as_run_and_submit_print_it(tmp_path: Path, s3) -> None:
    bucket = s3.create_bucket(f"ocr-{uuid.uuid4().hex[:12]}")
    job = "ocr/documents/case-1cdb5f282699/pages-0001-0001"  # a job `vlm-ocr submit` sent
    report = PageReport(page=1, source="case.pdf", status="ok", key=f"{job}/page-0001.md")
    manifest = JobResult(job_id="j", status="ok", prefix=job, pages=[report])
    client = s3_client(s3.endpoint)
    client.put_object(Bucket=bucket, Key=f"{job}/manifest.json", Body=manifest.model_dump_json())
    client.put_object(Bucket=bucket, Key=f"{job}/page-0001.md", Body=b"Article 1 shall apply.")
    where = s3.settings_update(bucket) | {"bucket_prefix": "ocr"}
    env = {k.upper(): str(v) for k, v in where.items()}
    # Under BUCKET_PREFIX, as documented; with it, as `vlm-ocr run` prints keys; as an address.
    for results in (job.removeprefix("ocr/"), job, f"s3://{bucket}/{job}"):
        proc = review(results, "-o", "job.html", cwd=tmp_path, **env)
        assert proc.returncode == 0, (results, proc.stderr[-3000:])
        assert "1 of 1 pages shown" in proc.stdout
    # The document's folder `vlm-ocr submit` prints: its job folders named, as for a folder.
    proc = review("documents/case-1cdb5f282699", "-o", "doc.html", cwd=tmp_path, **env)
    assert proc.returncode == 2 and proc.stderr.endswith(  # after the store's log line
        f"vlm-ocr review: RESULTS: no job manifest at s3://{bucket}/ocr/documents/"
        "case-1cdb5f282699/manifest.json, but the job folder documents/case-1cdb5f282699/"
        "pages-0001-0001 is inside it: give that as RESULTS\n"
    )
    proc = review("s3://elsewhere/x", "-o", "x.html", cwd=tmp_path, **env)
    assert proc.returncode == 2
    assert f"RESULTS: s3://elsewhere/x is not in the bucket the settings name (s3://{bucket}/)" in (
        proc.stderr
    )


def fax_frames() -> list[Image.Image]:
    """Three pages of a fax, each with a black bar in its own third of the top edge."""
    frames = []
    for n, word in enumerate(("one", "two", "three")):
        frame = page_image([f"Fax page {word} of three, its own words."]).convert("L")
        third = frame.width // 3
        frame.paste(0, (n * third + 20, 20, (n + 1) * third - 20, 80))
        frames.append(frame.convert("1"))
    return frames


def bar_third(picture: str) -> int:
    """Which third of a page's picture holds the black bar along its top edge."""
    with Image.open(io.BytesIO(base64.b64decode(picture))) as shown:
        grey = shown.convert("L")
    third, band = grey.width // 3, grey.height * 0.05
    means = [
        sum(grey.crop((n * third, 0, (n + 1) * third, round(band))).getdata()) for n in range(3)
    ]
    return means.index(min(means))


def test_a_fax_job_draws_each_page_from_its_own_page_of_the_tiff(tmp_path: Path, run) -> None:
    frames = fax_frames()
    folder = tmp_path / "faxes"
    folder.mkdir()
    tiff = folder / "fax.tiff"
    frames[0].save(tiff, save_all=True, append_images=frames[1:], compression="group4")
    result = run(
        {"pdf": {"base64": b64(tiff.read_bytes()), "name": "fax.tiff"}, "output_prefix": "fax"}
    )
    assert [p.status for p in result.pages] == ["ok"] * 3, result.pages
    for given in (["--images", str(folder)], ["--pdf", str(tiff)]):
        proc = review("out/fax", *given, "-o", "fax.html", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr[-3000:]
        html = (tmp_path / "fax.html").read_text(encoding="utf-8")
        for n in (1, 2, 3):
            picture, said = picture_of(html, n)
            assert picture is not None, said
            assert bar_third(picture) == n - 1, (given, n)


def test_a_stopped_jobs_one_line_error_is_in_the_summary(tmp_path: Path) -> None:
    job = tmp_path / "stopped"
    job.mkdir()
    error = (
        "the job was stopped: 1 of 2 pages stored, the rest not processed; submitting it again "
        "reads only the pages missing"
    )
    pages = [
        PageReport(page=1, source="a.pdf", status="ok", key="stopped/page-0001.md"),
        PageReport(page=2, source="a.pdf", status="failed", error="not processed"),
    ]
    manifest = JobResult(job_id="j", status="partial", prefix="stopped", pages=pages, error=error)
    (job / "manifest.json").write_text(manifest.model_dump_json())
    (job / "page-0001.md").write_text("Article 1 shall apply.")
    proc = review(str(job), "-o", "stopped.html", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    html = (tmp_path / "stopped.html").read_text(encoding="utf-8")
    summary = html[html.index('<header class="summary">') : html.index("</header>")]
    assert error in summary


def test_the_headings_of_a_job_cut_to_size_count_the_pages_shown(job: Job) -> None:
    out = job.folder.parent / "cut.html"
    args = [str(job.folder), "--pdf", str(job.pdf), "-o", str(out), "--max-mb", "0.05"]
    proc = review(*args, cwd=job.folder.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    html = out.read_text(encoding="utf-8")
    shown = [int(n) for n in re.findall(r'<article [^>]*id="page-(\d+)"', html)]
    flagged = len([n for n in shown if n in (2, 3)])  # pages 2 and 3 need attention
    said = "(2)" if flagged == 2 else f"({flagged} of 2 shown)"
    assert re.findall(r"<h2>([^<]*)</h2>", html)[:1] == [f"Needs attention {said}"]


def test_running_heads_the_job_dropped_are_no_difference_of_the_second_opinion() -> None:
    # the two readings agreed (1.000) before the job dropped "Item 1" as a running head from the
    # stored text: the CPU engine's line is left out of the comparison, not marked as missing
    from vlm_ocr.blocks import Block, PageBlocks
    from vlm_ocr.cli.results import PageView
    from vlm_ocr.cli.review.markup import opinion

    report = PageReport(page=2, source="minutes.pdf", status="ok", agreement=1.0, review=False)
    blocks = PageBlocks(
        page=2, width=800, height=1000, source="rapidocr", labelled=False,
        blocks=[Block(kind="page-header", content="Item 1"), Block(kind="text", content="Agreed.")],
    )  # fmt: skip
    view = PageView(report, text="The minutes were agreed.", blocks=blocks)
    second = "Item 1\nThe minutes were agreed."
    html = opinion(PageView(view.report, view.text, blocks=view.blocks, second=second))
    assert "<mark>" not in html and "Item 1" not in html
    assert "1 line the job left out of the stored text as running headers and footers" in html
    # a line of the page's own text is still marked where the readings differ
    other = opinion(PageView(report, "The minutes were agreed.", blocks=blocks, second="Other."))
    assert "<mark>" in other


def test_images_of_one_name_in_several_folders_each_get_their_own(tmp_path: Path) -> None:
    from vlm_ocr.cli.pictures import from_images

    def report(n: int, source: str) -> PageReport:
        return PageReport(page=n, source=source, status="ok")

    pages = [report(1, "scans/monday/page.png"), report(2, "key:scans/tuesday/page.png")]
    for day in ("monday", "tuesday"):
        (tmp_path / "tree" / "scans" / day).mkdir(parents=True)
        (tmp_path / "tree" / "scans" / day / "page.png").write_bytes(png_bytes(page_image([day])))
    found = from_images(tmp_path / "tree", pages)
    assert {n: w.path.parent.name for n, w in found.pages.items()} == {1: "monday", 2: "tuesday"}
    below = from_images(tmp_path / "tree" / "scans", pages)  # the recorded path's last folders
    assert {n: w.path.parent.name for n, w in below.pages.items()} == {1: "monday", 2: "tuesday"}
    # one of them alone, under the bare name: which page it is cannot be told, and it says so
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "page.png").write_bytes(png_bytes(page_image(["monday"])))
    flat = from_images(tmp_path / "flat", pages)
    assert not flat.pages and flat.missing[2].startswith(
        "no picture: the job read 2 files named page.png (scans/monday/page.png, "
        "scans/tuesday/page.png)"
    )


def test_a_pdf_pages_picture_is_drawn_at_the_screens_side_however_small_it_was_read(
    page: Path, job: Job
) -> None:
    from vlm_ocr.cli.pictures import SIDE

    html = page.read_text(encoding="utf-8")
    report = JobResult.model_validate_json((job.folder / "manifest.json").read_text()).pages[0]
    assert max(report.width or 0, report.height or 0) < SIDE  # the job read it smaller
    picture, _ = picture_of(html, 1)
    assert picture is not None
    with Image.open(io.BytesIO(base64.b64decode(picture))) as shown:
        assert max(shown.size) == SIDE


def test_a_pdf_whose_page_tree_miscounts_is_drawn_page_by_page_as_the_job_read_it(
    tmp_path: Path,
) -> None:
    from vlm_ocr.cli.pictures import from_pdf

    pdf = samples.pdf_from_pages(samples.numbered_pages(3, lines=1))
    path = tmp_path / "miscounted.pdf"
    path.write_bytes(pdf.replace(b"/Count 3", b"/Count 1"))  # pages 2 and 3 hidden from MuPDF
    pages = [
        PageReport(page=n, source="miscounted.pdf", status="ok", width=595, height=842)
        for n in (1, 2, 3)
    ]
    pictures = from_pdf(path, pages)
    assert not pictures.missing and sorted(pictures.pages) == [1, 2, 3]
    picture, doubt = pictures.jpeg(pages[2], (595, 842), text="Page 3 of 3. Reference number")
    assert picture is not None and doubt == ""
