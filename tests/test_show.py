"""`vlm-ocr show` as a user types it: the same arguments as `vlm-ocr review` for the same things,
and Chinese drawn with a font that has it (the system's), Latin as before.

The job's results are written here as the worker writes them (its manifest and a page's blocks,
through the contract's models), with blocks whose text is known, so what is drawn can be told."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pymupdf
import pytest
from PIL import Image, ImageDraw, ImageFont

from vlm_ocr import samples
from vlm_ocr.blocks import Block, PageBlocks
from vlm_ocr.cli import fonts, pictures, show
from vlm_ocr.cli import main as cli
from vlm_ocr.contract import JobResult, PageReport
from vlm_ocr.pdf_file import file_sha256

WIDTH, HEIGHT = 3000, 2000  # scale 2: the text drawn 24 pixels high
BLOCKS = {"zhong": "中文", "yue": "契約", "latin": "Lease of the premises"}
TOPS = {"zhong": 300, "yue": 700, "latin": 1100}
LINE = 3 * 2  # the outline's width at scale 2 (show.draw): the text starts two widths in
INK = (60, 60, 60)  # the colour of a block's text on a blank page


def write_job(folder: Path) -> Path:
    """A one-page job's results, its three blocks' texts as above, in `folder/cjk`."""
    job = folder / "cjk"
    job.mkdir(parents=True)
    blocks = [
        Block(kind="text", box=(200, top, 1400, top + 200), content=BLOCKS[name])
        for name, top in TOPS.items()
    ]
    doc = PageBlocks(
        page=1, width=WIDTH, height=HEIGHT, source="rapidocr", labelled=False, blocks=blocks
    )
    (job / "page-0001.json").write_text(doc.model_dump_json())
    report = PageReport(
        page=1,
        source="lease.png",
        status="ok",
        width=WIDTH,
        height=HEIGHT,
        blocks=len(blocks),
        blocks_key="cjk/page-0001.json",
    )
    result = JobResult(job_id="j1", status="ok", prefix="cjk", pages=[report])
    (job / "manifest.json").write_text(result.model_dump_json())
    return job


def text_of(drawn: Image.Image, name: str) -> Image.Image:
    """Where a block's first characters are drawn (blank page: its text at its corner)."""
    x, y = 200 + 2 * LINE, TOPS[name] + 2 * LINE
    return drawn.crop((x, y, x + 56, y + 34)).convert("L")


def drawn_by_show(job: Path, out: Path) -> Image.Image:
    assert cli.main(["show", str(job), "--page", "1", "-o", str(out)]) == 0
    with Image.open(out) as image:
        return image.copy()


def test_chinese_is_drawn_with_a_font_that_has_it_and_latin_as_before(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    if fonts.cjk_font() is None:
        pytest.skip(f"no CJK font on this machine to draw with; {fonts.INSTALL}")
    job = write_job(tmp_path)
    drawn = drawn_by_show(job, tmp_path / "found.png")
    assert "no font with Chinese" not in capsys.readouterr().err
    # Without a CJK font (what PIL's own font does): every character the same empty box.
    monkeypatch.setattr(fonts, "cjk_font", lambda: None)
    show.warn_no_cjk_font.cache_clear()
    tofu = drawn_by_show(job, tmp_path / "tofu.png")
    err = capsys.readouterr().err
    assert err.count("no font with Chinese, Japanese or Korean on this system") == 1  # once
    assert "fonts-noto-cjk" in err and "fonts-wqy-microhei" in err
    show.warn_no_cjk_font.cache_clear()
    for image in (drawn, tofu):
        assert min(text_of(image, "zhong").getdata()) < 100  # ink where the text is
    # In boxes, 中文 and 契約 look the same; drawn with the font, they are their own glyphs.
    assert text_of(tofu, "zhong").tobytes() == text_of(tofu, "yue").tobytes()
    assert text_of(drawn, "zhong").tobytes() != text_of(drawn, "yue").tobytes()
    assert text_of(drawn, "zhong").tobytes() != text_of(tofu, "zhong").tobytes()
    # Latin text is drawn as it always was, in PIL's own font, CJK font or none.
    assert text_of(drawn, "latin").tobytes() == text_of(tofu, "latin").tobytes()
    before, now = (Image.new("RGB", (600, 60), "white") for _ in range(2))
    latin = BLOCKS["latin"]
    ImageDraw.Draw(before).text((5, 5), latin, font=ImageFont.load_default(size=24), fill=INK)
    show.write(ImageDraw.Draw(now), (5, 5), latin, 24)
    assert now.tobytes() == before.tobytes()


LATIN = ('"Segoe UI"', "Consolas")  # the last Latin family of body's stack, and of pre's


def font_rules(html: str) -> list[str]:
    return [html[html.index(f"{e} {{ font-family:") :].split("}", 1)[0] for e in ("body", "pre")]


def test_the_review_page_names_the_systems_cjk_font_in_its_font_stack(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    found = fonts.cjk_font()
    if found is None or not found.family:
        pytest.skip(f"no CJK font known to fontconfig on this machine; {fonts.INSTALL}")
    job = write_job(tmp_path)
    out = tmp_path / "review.html"
    assert cli.main(["review", str(job), "-o", str(out)]) == 0
    assert "no font with Chinese" not in capsys.readouterr().out
    for rule, latin in zip(font_rules(out.read_text(encoding="utf-8")), LATIN, strict=True):
        assert f'{latin}, "{found.family}", ' in rule, rule  # after Latin, the one found here
    # On a machine without one: the common families still named, and the summary says so.
    monkeypatch.setattr(fonts, "cjk_font", lambda: None)
    assert cli.main(["review", str(job), "-o", str(out)]) == 0
    said = capsys.readouterr().out
    assert "no font with Chinese, Japanese or Korean on this system" in said
    assert "apt-get install fonts-noto-cjk" in said
    html = out.read_text(encoding="utf-8")
    assert "apt-get install fonts-noto-cjk" in html  # in the page's summary too
    common = ", ".join(f'"{family}"' for family in fonts.CSS_FAMILIES)
    for rule, latin in zip(font_rules(html), LATIN, strict=True):
        assert f"{latin}, {common}, " in rule, rule


def options(command: str) -> dict[str, tuple[tuple[str, ...], str | None]]:
    """The command's arguments: each one's spellings and help, by its name."""
    sub = next(
        a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction)
    ).choices[command]
    return {a.dest: (tuple(a.option_strings), a.help) for a in sub._actions}


def test_show_and_review_take_the_same_arguments_for_the_same_things(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    show_args, review_args = options("show"), options("review")
    for same in ("results", "pdf", "images", "source", "dir"):
        assert show_args[same] == review_args[same], same
    assert show_args["out"][0] == review_args["out"][0] == ("-o", "--out")
    # RESULTS: the job's folder, or its prefix in the store (here OUTPUT_DIR), in both.
    job = write_job(tmp_path / "results")
    monkeypatch.setenv("OUTPUT_DIR", str(tmp_path / "results"))
    monkeypatch.chdir(tmp_path)
    for results in (str(job), "cjk"):
        assert cli.main(["show", results, "--page", "1", "--out", "page.png"]) == 0
        assert cli.main(["review", results, "--out", "review.html"]) == 0
        out = capsys.readouterr().out
        assert "page.png: 3 blocks" in out and "review.html: 1 of 1 pages shown" in out
    # The document the same way in both, and the same refusal of one that is not there.
    for command in (["show", "cjk", "--page", "1"], ["review", "cjk"]):
        assert cli.main([*command, "--images", "nowhere"]) == 2
        err = capsys.readouterr().err
        assert err.endswith(
            "--images: no such folder: nowhere; accepted: the folder of the "
            "images the job read, under the names it gave them\n"
        ), err


# --- the document given, checked against the job's own record ------------------------------------


def write_read_job(
    root: Path, name: str, source: str, size: tuple[int, int], pdf_size: tuple[float, float] | None
) -> Path:
    """A one-page job's results in `root/name`, as the worker writes them for a page it read
    from `source` at `size` pixels: a PDF's page (its size in points, `pdf_size`) or an image
    (None)."""
    job = root / name
    job.mkdir(parents=True)
    block = Block(kind="text", box=(100, 100, 900, 300), content="Article 1 shall apply.")
    doc = PageBlocks(
        page=1,
        width=size[0],
        height=size[1],
        pdf_size=pdf_size,
        source="rapidocr",
        labelled=True,
        blocks=[block],
    )
    (job / "page-0001.json").write_text(doc.model_dump_json())
    (job / "page-0001.md").write_text(block.content or "")
    report = PageReport(
        page=1,
        source=source,
        status="ok",
        key=f"{name}/page-0001.md",
        width=size[0],
        height=size[1],
        blocks=1,
        blocks_key=f"{name}/page-0001.json",
    )
    result = JobResult(job_id=name, status="ok", prefix=name, pages=[report])
    (job / "manifest.json").write_text(result.model_dump_json())
    return job


def write_pdf(path: Path, width: float, height: float) -> Path:
    with pymupdf.open() as pdf:
        pdf.new_page(width=width, height=height).insert_text((72, 100), "Article 1 shall apply.")
        pdf.save(path)
    return path


def pixels(path: Path) -> bytes:
    with Image.open(path) as image:
        return image.tobytes()


def test_a_document_other_than_the_jobs_is_said_and_not_drawn_under_its_blocks(
    tmp_path: Path, capsys
) -> None:
    two = write_pdf(tmp_path / "two.pdf", 595, 842)
    landscape = write_pdf(tmp_path / "landscape.pdf", 842, 595)
    job = write_read_job(tmp_path / "r1", "two", "two.pdf", (1064, 1505), (595, 842))
    blank = show.draw(PageBlocks.model_validate_json((job / "page-0001.json").read_text()))
    out = tmp_path / "page.png"
    show_page = ["show", str(job), "--page", "1", "-o", str(out)]
    # The job's own PDF: its page under the blocks, and nothing to say of it.
    assert cli.main([*show_page, "--pdf", str(two)]) == 0
    said = capsys.readouterr().out
    assert "not the size" not in said and "blank page" not in said, said
    assert pixels(out) != blank.tobytes()
    # Another PDF, its page landscape: said plainly, and not stretched under the blocks.
    assert cli.main([*show_page, "--pdf", str(landscape)]) == 0
    said = capsys.readouterr().out
    assert "the job read two.pdf: its pages are drawn from landscape.pdf" in said
    wrong = (
        "page 1 of landscape.pdf is 842×595 pt, landscape, not the size of the page the job "
        "read (595×842 pt, portrait)"
    )
    assert f"{wrong}; give the document the job read; its blocks are drawn on a blank page" in said
    assert pixels(out) == blank.tobytes()
    # review, given the same: the same words, in its summary and in place of the picture.
    html = tmp_path / "review.html"
    assert cli.main(["review", str(job), "--pdf", str(landscape), "-o", str(html)]) == 0
    said = capsys.readouterr().out
    assert "the job read two.pdf: its pages are drawn from landscape.pdf" in said
    assert "no picture for 1 of the 1 pages shown (page 1; each says why)" in said
    written = html.read_text(encoding="utf-8")
    assert wrong in written and "<img" not in written


def test_a_pdf_given_for_a_job_that_read_an_image_is_said_whatever_the_images_name(
    tmp_path: Path, capsys
) -> None:
    two = write_pdf(tmp_path / "two.pdf", 595, 842)
    job = write_read_job(tmp_path / "r2", "scan", "scan.pdf", (827, 1170), None)
    out = tmp_path / "page.png"
    show_page = ["show", str(job), "--page", "1", "-o", str(out)]
    assert cli.main([*show_page, "--pdf", str(two)]) == 0
    assert (
        "page 1: no picture: the job read page 1 from an image (scan.pdf), not from a PDF's "
        "page; give --images DIR, the folder holding it; its blocks are drawn on a blank page"
    ) in capsys.readouterr().out
    # The image itself, by the name the job read it under: drawn when it is of the page's
    # shape, said when it is not.
    scans = tmp_path / "scans"
    scans.mkdir()
    Image.new("RGB", (827, 1170), "white").save(scans / "scan.pdf", format="PNG")
    assert cli.main([*show_page, "--images", str(scans)]) == 0
    assert "blank page" not in capsys.readouterr().out
    Image.new("RGB", (1170, 827), "white").save(scans / "scan.pdf", format="PNG")
    assert cli.main([*show_page, "--images", str(scans)]) == 0
    assert (
        "page 1: no picture: scan.pdf is 1170×827 pixels, landscape, not the shape of the page "
        "the job read (827×1170 pixels, portrait)"
    ) in capsys.readouterr().out


def test_a_folder_holding_job_folders_names_them(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    write_read_job(tmp_path / "r1", "two", "two.pdf", (1064, 1505), (595, 842))
    for command in (["show", "r1", "--page", "1"], ["review", "r1"]):
        assert cli.main(command) == 2
        assert capsys.readouterr().err.endswith(
            "RESULTS: r1 holds no manifest.json, but the job folder r1/two is inside it: give "
            "that as RESULTS\n"
        )
    write_read_job(tmp_path / "r1", "three", "three.pdf", (1064, 1505), (595, 842))
    assert cli.main(["show", "r1", "--page", "1"]) == 2
    assert capsys.readouterr().err.endswith(
        "RESULTS: r1 holds no manifest.json, but job folders are inside it: give one of them as "
        "RESULTS (r1/three, r1/two)\n"
    )


def test_a_folder_submit_wrote_names_its_jobs_in_the_bucket(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "contract-aa73902021bb").mkdir()
    parts = [
        {"first": 1, "last": 50, "manifest_key": "ocr/documents/c/pages-0001-0050/manifest.json"},
        {"first": 51, "last": 60, "manifest_key": "ocr/documents/c/pages-0051-0060/manifest.json"},
    ]
    document = {"source": "box1/contract.pdf", "parts": parts}
    (tmp_path / "contract-aa73902021bb/document.json").write_text(json.dumps(document))
    assert cli.main(["review", "contract-aa73902021bb"]) == 2
    assert capsys.readouterr().err.endswith(
        "RESULTS: contract-aa73902021bb holds no manifest.json: it is the folder `vlm-ocr "
        "submit` wrote for box1/contract.pdf, whose jobs' results are in the bucket; give one "
        "of them as RESULTS, with the bucket settings (ocr/documents/c/pages-0001-0050, "
        "ocr/documents/c/pages-0051-0060)\n"
    )


def test_a_pdf_of_the_pages_size_whose_words_are_not_the_jobs_is_drawn_with_a_doubt(
    tmp_path: Path, capsys
) -> None:
    job = write_read_job(tmp_path / "r3", "lease", "lease.pdf", (1064, 1505), (595, 842))
    read = (
        "The tenant shall keep the premises clean, repair any damage caused by guests, pay the "
        "monthly rent before the fifth working day, and return every single key when the "
        "lease finally ends."
    )
    (job / "page-0001.md").write_text(read)
    other = (
        "Minutes of the annual meeting: members present approved last year's accounts, elected "
        "three officers, thanked volunteers, discussed parking behind the hall, adjourned early."
    )
    for name, text in (("lease.pdf", read), ("minutes.pdf", other)):
        with pymupdf.open() as pdf:
            pdf.new_page(width=595, height=842).insert_textbox((72, 72, 520, 400), text)
            pdf.save(tmp_path / name)
    out = tmp_path / "page.png"
    show_page = ["show", str(job), "--page", "1", "-o", str(out)]
    assert cli.main([*show_page, "--pdf", str(tmp_path / "lease.pdf")]) == 0
    assert "may not be the page" not in capsys.readouterr().out
    assert cli.main([*show_page, "--pdf", str(tmp_path / "minutes.pdf")]) == 0
    said = capsys.readouterr().out
    assert (
        "  page 1: page 1 of minutes.pdf may not be the page the job read: of the 21 words the "
        "job read on it, 0 are in that page's own text; give the document the job read\n"
    ) in said
    assert "blank page" not in said  # only a doubt: the page is drawn under the blocks


def test_a_pdf_that_cannot_be_opened_is_said_naming_pdf(tmp_path: Path, capsys) -> None:
    job = write_read_job(tmp_path / "r4", "two", "two.pdf", (1064, 1505), (595, 842))
    whole = write_pdf(tmp_path / "two.pdf", 595, 842).read_bytes()
    (tmp_path / "cut.pdf").write_bytes(whole[:200])  # its header, then cut off
    (tmp_path / "garbage.pdf").write_bytes(b"%PDF-1.7\n" + bytes(range(256)) * 4)
    for name in ("cut.pdf", "garbage.pdf"):
        pdf = tmp_path / name
        for command in (["show", str(job), "--page", "1"], ["review", str(job)]):
            out = tmp_path / ("page.png" if command[0] == "show" else "review.html")
            assert cli.main([*command, "--pdf", str(pdf), "-o", str(out)]) == 2
            assert capsys.readouterr().err == (
                f"vlm-ocr {command[0]}: --pdf: {pdf} is corrupt or truncated: it starts as a PDF "
                "but cannot be read; accepted: the PDF the job read, complete\n"
            )
            assert not out.exists()


def cut_short(whole: bytes) -> bytes:
    """The longest start of `whole`, at most a third of it, that MuPDF opens by repairing it:
    pages rebuilt from what is left (the last ones of a default size), as a download cut off
    opens."""
    for end in range(len(whole) // 3, 0, -50):
        try:
            with pymupdf.open(stream=whole[:end], filetype="pdf") as doc:
                if doc.is_repaired and doc.page_count:
                    return whole[:end]
        except Exception:  # MuPDF cannot open this cut at all; a shorter one may
            continue
    raise AssertionError("no start of the PDF opens repaired")


def test_a_pdf_cut_short_that_mupdf_repairs_is_refused_unless_it_is_the_jobs_own(
    tmp_path: Path, capsys
) -> None:
    whole = samples.pdf_from_pages(samples.numbered_pages(4, lines=8))
    (tmp_path / "cut.pdf").write_bytes(cut_short(whole))
    cut = tmp_path / "cut.pdf"
    job = write_read_job(tmp_path / "r6", "four", "four.pdf", (1064, 1505), (595, 842))
    for command in (["show", str(job), "--page", "1"], ["review", str(job)]):
        out = tmp_path / ("page.png" if command[0] == "show" else "review.html")
        assert cli.main([*command, "--pdf", str(cut), "-o", str(out)]) == 2
        assert capsys.readouterr().err == (
            f"vlm-ocr {command[0]}: --pdf: {cut} is corrupt or truncated: it starts as a PDF but "
            "cannot be read whole (MuPDF had to repair it); accepted: the PDF the job read, "
            "complete\n"
        )
        assert not out.exists()
    # The worker reads a damaged PDF as MuPDF repairs it: given the very file the job read
    # (its SHA-256), its pages are drawn as the job read them.
    manifest = job / "manifest.json"
    result = JobResult.model_validate_json(manifest.read_text())
    manifest.write_text(
        result.model_copy(update={"input_sha256": file_sha256(cut)}).model_dump_json()
    )
    out = tmp_path / "page.png"
    assert cli.main(["show", str(job), "--page", "1", "--pdf", str(cut), "-o", str(out)]) == 0
    assert "blank page" not in capsys.readouterr().out


def reports(*sources: str, dpi: int | None = None) -> list[PageReport]:
    return [
        PageReport(page=n, source=source, status="ok", dpi=dpi)
        for n, source in enumerate(sources, 1)
    ]


NOT_KEPT = "and the worker keeps no copy of a job's input"
# what the job recorded of its input -> what a page without its picture says
HINTS = [
    # `vlm-ocr run` names each local file it reads; so may a job sent to an endpoint
    (
        reports("Case 42.pdf", "Case 42.pdf", dpi=144),
        f"the job read Case 42.pdf, {NOT_KEPT}; give the file it read: --pdf FILE",
    ),
    (
        reports("base64", dpi=144),
        f"the job was sent its document as base64 without a `name`, {NOT_KEPT}; give the file it "
        "read: --pdf FILE",
    ),
    (
        reports("https://example.com/docs/lease.pdf", dpi=144),
        f"the job fetched lease.pdf by URL, {NOT_KEPT}; give the file it read: --pdf FILE",
    ),
    (
        reports(*(f"scans/{n}.png" for n in range(1, 6))),
        f"the job read 1.png, 2.png, 3.png and 2 more, {NOT_KEPT}; give the folder of the "
        "images it read: --images DIR",
    ),
    (
        reports("base64", "base64"),
        f"the job's images were sent as base64 without a `name`, {NOT_KEPT}; with no name "
        "recorded, no image can be told to be a page's",
    ),
]


@pytest.mark.parametrize(("pages", "said"), HINTS, ids=[p[0].source for p, _ in HINTS])
def test_without_pictures_a_page_says_what_to_give_by_how_the_job_got_its_input(
    pages: list[PageReport], said: str
) -> None:
    assert pictures.not_kept(pages) == f"no page pictures: {said}"


def test_a_job_run_on_a_local_file_asks_for_that_file_not_for_base64_or_a_url(
    tmp_path: Path, capsys
) -> None:
    job = write_read_job(tmp_path / "r7", "four", "four.pdf", (1064, 1505), (595, 842))
    assert cli.main(["show", str(job), "--page", "1", "-o", str(tmp_path / "page.png")]) == 0
    said = capsys.readouterr().out
    assert (
        f"  page 1: no page pictures: the job read four.pdf, {NOT_KEPT}; give the file it read: "
        "--pdf FILE; its blocks are drawn on a blank page\n"
    ) in said
    assert "base64" not in said and "URL" not in said


def test_a_damaged_blocks_file_is_said_in_one_line(tmp_path: Path, capsys) -> None:
    job = write_read_job(tmp_path / "r5", "two", "two.pdf", (1064, 1505), (595, 842))
    (job / "page-0001.json").write_text("{bad\n")  # cut short, or written over
    assert cli.main(["show", str(job), "--page", "1", "-o", str(tmp_path / "page.png")]) == 1
    assert capsys.readouterr().err == (
        "vlm-ocr show: no blocks for page 1 (its blocks file two/page-0001.json is not valid "
        "JSON (damaged?); run the job again to rewrite it)\n"
    )
    (job / "page-0001.json").write_text('{"page": 1}')  # JSON, of another shape
    assert cli.main(["show", str(job), "--page", "1", "-o", str(tmp_path / "page.png")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is not one this version reads (width: Field required" in err


def test_a_prefix_in_output_dir_holding_job_folders_names_them(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    monkeypatch.setenv("OUTPUT_DIR", str(tmp_path / "output"))
    monkeypatch.chdir(tmp_path)
    write_read_job(tmp_path / "output" / "batch", "two", "two.pdf", (1064, 1505), (595, 842))
    assert cli.main(["show", "batch", "--page", "1"]) == 2  # not here: a prefix in OUTPUT_DIR
    said = capsys.readouterr().err
    assert said.startswith("vlm-ocr show: RESULTS: no job manifest at file://"), said
    assert said.endswith(
        "/output/batch/manifest.json, but the job folder batch/two is inside it: give that as "
        "RESULTS\n"
    )


def test_accented_latin_greek_and_cyrillic_are_drawn_as_their_own_letters() -> None:
    def drawn(text: str) -> bytes:
        image = Image.new("RGB", (200, 60), "white")
        show.write(ImageDraw.Draw(image), (5, 5), text, 24)
        return image.tobytes()

    # PIL's own font draws each of them as the same empty box: here each is a glyph of its own.
    letters = "éüßŁαЖ"
    assert len({drawn(c) for c in letters}) == len(letters)
    assert drawn("Café Müller") != drawn("Caf\U0010fffd M\U0010fffdller")


def test_a_blocks_text_on_a_blank_page_stays_inside_its_box(monkeypatch) -> None:
    monkeypatch.setattr(fonts, "cjk_font", lambda: None)  # its boxes take room all the same
    show.warn_no_cjk_font.cache_clear()
    words = "The quick brown fox jumps over the lazy dog, Café Müller, 出租人得於租期屆滿 " * 40
    left, right = (100, 200, 700, 500), (760, 200, 1190, 500)  # two columns, a gutter between
    blocks = [Block(kind="text", box=box, content=words) for box in (left, right)]
    doc = PageBlocks(
        page=1, width=1200, height=800, source="rapidocr", labelled=False, blocks=blocks
    )
    drawn = show.draw(doc).convert("L")
    show.warn_no_cjk_font.cache_clear()
    outside = [
        (left[2] + 1, left[1], right[0] - 1, left[3]),  # the gutter
        (right[2] + 1, right[1], 1200, right[3]),  # past the right column, to the page's edge
        (0, left[3] + 1, 1200, 800),  # below both
    ]
    for region in outside:
        assert min(drawn.crop(region).getdata()) > 200, region  # white: no text there
    # Wrapped to more lines: ink in each box's lower half, not only on its first line.
    for x0, y0, x1, y1 in (left, right):
        assert min(drawn.crop((x0 + 10, (y0 + y1) // 2, x1 - 10, y1 - 10)).getdata()) < 100
