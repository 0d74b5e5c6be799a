"""`vlm-ocr run` as a user types it: its files and options checked before the engine starts and
named as the user gave them, and its progress while pages are read."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

from PIL import Image

from vlm_ocr import samples
from vlm_ocr.cli.progress import CLEAR, PageProgress
from vlm_ocr.contract import PageItem, PageReport
from vlm_ocr.prompts import PRESETS
from vlm_ocr_lab.standins.local_endpoint import worker_environ

from .support import TEST_PIXELS, page_image, png_bytes


def vlm_ocr(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vlm_ocr", *args],
        cwd=cwd,
        env=worker_environ(MAX_PIXELS=str(TEST_PIXELS)),
        capture_output=True,
        text=True,
        timeout=600,
    )


def write_pdf(path: Path, pages: int) -> None:
    path.write_bytes(samples.pdf_from_pages(samples.numbered_pages(pages, lines=2)))


def test_each_file_is_named_with_what_is_wrong_before_the_engine_starts(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("meeting notes\n")
    (tmp_path / "scans").mkdir()
    Image.new("RGB", (64, 64), "white").save(tmp_path / "logo.gif")
    (tmp_path / "cut.pdf").write_bytes(b"%PDF-1.7 cut off here")
    write_pdf(tmp_path / "two.pdf", 2)
    proc = vlm_ocr(
        "run", "notes.txt", "scans", "logo.gif", "cut.pdf", "gone.png", "two.pdf",
        "--pages", "9-12", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    accepted = "accepted: PDF, PNG, JPEG, WebP or TIFF files (.pdf, .png, .jpg"
    lines = proc.stderr.splitlines()  # one line each, and nothing else: no engine was started
    assert len(lines) == 6, proc.stderr
    assert lines[0].startswith(f"vlm-ocr run: notes.txt: not a PDF or an image; {accepted}")
    assert lines[1].startswith(f"vlm-ocr run: scans: a folder, not a file; {accepted}")
    assert lines[2] == "vlm-ocr run: logo.gif: GIF images are not accepted; accepted: PNG, " + (
        "JPEG, WebP, TIFF"
    )
    assert lines[3].startswith("vlm-ocr run: cut.pdf: the PDF is corrupt or truncated")
    assert lines[4] == "vlm-ocr run: gone.png: no such file"
    assert lines[5] == (
        "vlm-ocr run: two.pdf: --pages: '9-12' selects no page of this document, which has 2 pages"
    )
    assert "input." not in proc.stderr  # no job field the user never wrote


def test_each_bad_option_is_named_by_its_flag_with_what_is_accepted(tmp_path: Path) -> None:
    write_pdf(tmp_path / "two.pdf", 2)
    proc = vlm_ocr(
        "run", "two.pdf", "--pages", "abc", "--max-pixels", "10", "--prompt", "poetry",
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "vlm-ocr run: --pages: 'abc' is not a page selection; accepted: 1-based page numbers and "
        'ranges such as "1-3,7" or "5-"',
        f"vlm-ocr run: --prompt: unknown preset 'poetry'; accepted: {', '.join(sorted(PRESETS))}",
        "vlm-ocr run: --max-pixels: got the number 10; accepted: a whole number from 65,536 to "
        "16,000,000",
    ]


def test_progress_is_a_line_every_while_when_stderr_is_not_a_terminal(tmp_path: Path) -> None:
    write_pdf(tmp_path / "three.pdf", 3)
    (tmp_path / "scan.png").write_bytes(png_bytes(page_image(["Invoice 42", "Total 17.50"])))
    proc = vlm_ocr(
        "run", "three.pdf", "scan.png", "--out", "results", "--progress-every", "0",
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.startswith("vlm-ocr run: ")]
    # --progress-every 0: a line per page, over all the files' pages, with pace and time left
    shape = re.compile(r"vlm-ocr run: (\d)/4 pages \(\d+ %\), [\d.]+ pages/s, (.+) \((\S+)\)")
    seen = [shape.fullmatch(line) for line in lines]
    assert all(seen) and len(seen) == 4, lines
    assert [int(m[1]) for m in seen if m] == [1, 2, 3, 4]
    assert [m[3] for m in seen if m] == ["three.pdf"] * 3 + ["scan.png"]
    assert all(m[2].endswith(" left") for m in seen[:3] if m)
    assert seen[3] and seen[3][2].startswith("all in ")
    assert "three.pdf: 3/3 pages ok" in proc.stdout and "scan.png: 1/1 pages ok" in proc.stdout


def test_quiet_leaves_stderr_to_warnings(tmp_path: Path) -> None:
    (tmp_path / "scan.png").write_bytes(png_bytes(page_image(["Invoice 42", "Total 17.50"])))
    proc = vlm_ocr(
        "run", "scan.png", "--out", "results", "--quiet", "--progress-every", "0", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == "" and "scan.png: 1/1 pages ok" in proc.stdout


def page_item(done: int, total: int, status: str = "ok") -> PageItem:
    report = PageReport(page=done, source="a.pdf", status=status)  # type: ignore[arg-type]
    return PageItem(done=done, total=total, page=report)


def test_on_a_terminal_the_line_is_redrawn_in_place_and_cleared() -> None:
    now = [100.0]
    out = io.StringIO()
    progress = PageProgress(3, out, live=True, every_s=30, clock=lambda: now[0])
    progress.file("a.pdf")
    for done, status in ((1, "ok"), (2, "failed"), (3, "ok")):
        now[0] += 2.0
        progress(page_item(done, 3, status))
    progress.clear()
    drawn = out.getvalue().split(CLEAR)
    assert drawn == [
        "",
        "0/3 pages (0 %) (a.pdf)",  # at once, before the first page is read
        "1/3 pages (33 %), 0.50 pages/s, 4 s left (a.pdf)",
        "2/3 pages (66 %), 1 failed, 0.50 pages/s, 2 s left (a.pdf)",
        "3/3 pages (100 %), 1 failed, 0.50 pages/s, all in 6 s (a.pdf)",
        "",  # cleared before what comes next on the terminal
    ]
