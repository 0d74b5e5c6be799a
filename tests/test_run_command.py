"""`vlm-ocr run` as a user types it: its files and options checked before the engine starts and
named as the user gave them, each file's results in a folder of its own, its progress while
pages are read, and Ctrl-C."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import unicodedata
from pathlib import Path

import pymupdf
from PIL import Image

from vlm_ocr.cli.local_files import Held, LocalFile, check_file, folder_name, result_folders
from vlm_ocr.cli.progress import CLEAR, PageProgress
from vlm_ocr.cli.run import summary
from vlm_ocr.contract import JobResult, PageItem, PageReport, Totals, check_prefix
from vlm_ocr.prompts import PRESETS
from vlm_ocr_lab.standins.local_endpoint import worker_environ

from .support import (
    SPARE_LIMITS_ENV,
    TEST_PIXELS,
    foreground,
    free_port,
    make_settings,
    page_image,
    png_bytes,
    unwritable_folder,
    write_pdf,
)


def vlm_ocr(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vlm_ocr", *args],
        cwd=cwd,
        env=worker_environ(MAX_PIXELS=str(TEST_PIXELS), **env),
        capture_output=True,
        text=True,
        timeout=600,
    )


def reference(first: int) -> str:
    """What `numbered_pages` writes on the page numbered `first`, and on no other."""
    return f"Reference number {first * 7919 % 100000:05d}"


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
    assert lines[1].endswith(", of which it holds none")
    assert lines[2] == "vlm-ocr run: logo.gif: GIF images are not accepted; accepted: PNG, " + (
        "JPEG, WebP, TIFF"
    )
    assert lines[3].startswith("vlm-ocr run: cut.pdf: the PDF is corrupt or truncated")
    assert lines[4] == "vlm-ocr run: gone.png: no such file"
    assert lines[5] == (
        "vlm-ocr run: two.pdf: --pages: '9-12' selects no page of this document, which has 2 pages"
    )
    assert "input." not in proc.stderr  # no job field the user never wrote


def test_a_file_that_takes_too_long_to_open_is_named_and_stalls_nothing(tmp_path: Path) -> None:
    # Each file is opened in a render process under RENDER_TIMEOUT_S before the engine starts:
    # a damaged PDF that MuPDF must repair by reading tens of megabytes takes a good part of a
    # second, far past a limit of a millisecond; it is named, and nothing else starts.
    doc = pymupdf.open()
    doc.new_page().insert_text((72, 72), "A page before a long tail of damage.")
    (tmp_path / "damaged.pdf").write_bytes(doc.tobytes() + b"%" + os.urandom(48 << 20))
    proc = vlm_ocr("run", "damaged.pdf", cwd=tmp_path, RENDER_TIMEOUT_S="0.001")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "vlm-ocr run: damaged.pdf: not opened within 0.001 s (RENDER_TIMEOUT_S), so the worker "
        "would not read it either; a damaged or crafted file is likely, or raise RENDER_TIMEOUT_S"
    ]


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
    # (and the next page, when the engine has it already)
    shape = re.compile(
        r"vlm-ocr run: (\d)/4 pages \(\d+ %\)(?:, 1 reading)?, [\d.]+ pages/s, (.+) \((\S+)\)"
    )
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


def job_folders(results: Path) -> list[str]:
    return sorted(p.name for p in results.iterdir() if not p.name.startswith("."))  # not .meta


# file -> the first page number its text carries (each file's own text), or None: an image
SAME_NAMES = {"合約.pdf": 1, "租約.pdf": 2, "two.pdf": 3, "sub/two.pdf": 4, "scan.pdf": 5}


def test_each_file_has_a_folder_of_its_own_and_a_rerun_finds_it_again(tmp_path: Path) -> None:
    for name, first in SAME_NAMES.items():
        write_pdf(tmp_path / name, 1, first)
    (tmp_path / "scan.png").write_bytes(png_bytes(page_image(["Invoice 42", "Total 17.50"])))
    command = ("run", *SAME_NAMES, "scan.png", "--pages", "1", "--out", "results", "--quiet")
    proc = vlm_ocr(*command, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # --pages cannot select a page of an image: said, and the image read whole
    assert (
        proc.stderr
        == "vlm-ocr run: note: scan.png: an image, read whole: --pages is for the PDFs\n"
    )
    folders = job_folders(tmp_path / "results")
    digest = re.compile(r"file-[0-9a-f]{8}")
    assert folders[2:] == ["scan", "scan-2", "two", "two-2"], folders
    assert all(digest.fullmatch(f) for f in folders[:2]), folders
    said = dict(re.findall(r"^(\S+): .*\n  folder:   file://\S+/results/(\S+)", proc.stdout, re.M))
    assert said["sub/two.pdf"] == "two-2" and said["scan.png"] == "scan-2", proc.stdout
    assert "two-2 (not two: it holds another file's results)" in proc.stdout
    for name, first in SAME_NAMES.items():  # each folder holds its own file's results alone
        folder = tmp_path / "results" / said[name]
        manifest = json.loads((folder / "manifest.json").read_text())
        assert [p["source"] for p in manifest["pages"]] == [Path(name).name]
        assert reference(first) in (folder / "document.md").read_text()
    assert "Invoice 42" in (tmp_path / "results/scan-2/page-0001.md").read_text()
    again = vlm_ocr(*command, "--json", cwd=tmp_path)  # the same command: the same folders
    assert again.returncode == 0, again.stderr[-3000:]
    results = [json.loads(r) for r in re.split(r"(?m)^(?=\{)", again.stdout) if r.strip()]
    assert [r["prefix"] for r in results] == [said[n] for n in [*SAME_NAMES, "scan.png"]]
    assert all(page["reused"] for r in results for page in r["pages"])
    assert job_folders(tmp_path / "results") == folders


def test_a_folder_name_is_what_a_key_may_hold_and_the_same_on_every_run() -> None:
    cjk = folder_name(Path("合約.pdf"))
    assert re.fullmatch(r"file-[0-9a-f]{8}", cjk) and cjk != folder_name(Path("租約.pdf"))
    assert folder_name(Path("a/合約.pdf")) == cjk  # the name, not where the file lies
    nfd = unicodedata.normalize("NFD", "Rapport été.pdf")  # as macOS spells a name
    assert folder_name(Path(nfd)) == folder_name(Path("Rapport été.pdf"))
    assert folder_name(Path("Rapport été.pdf")).startswith("Rapport_t-")
    assert folder_name(Path("Case 42.pdf")) == "Case_42"  # as before: earlier results are found
    long = folder_name(Path("x" * 250 + ".pdf"))
    for name in (cjk, long, folder_name(Path("..pdf")), folder_name(Path("--.pdf"))):
        check_prefix(name)  # raises when the store would refuse it
    paths = [Path(p) for p in ("a.pdf", "sub/a.pdf", "a-2.pdf", "A.png", "a.pdf", "sub/A.PDF")]
    files = [LocalFile(path, "pdf", 1, str(path)) for path in paths]

    async def nothing_stored(folder: str) -> Held | None:
        return None

    # a-2.pdf keeps its own name; the same file twice is one folder; case does not tell apart
    folders = asyncio.run(result_folders(files, nothing_stored))
    assert folders == ["a", "a-3", "a-2", "A-4", "a", "A-5"]


def test_a_later_run_writes_no_files_results_over_another_s(tmp_path: Path) -> None:
    # an archive read box by box, into one folder: each contract.pdf keeps its own results
    for box, first in (("box1", 1), ("box2", 11), ("box0", 21)):
        write_pdf(tmp_path / box / "contract.pdf", 3 if box == "box1" else 2, first)
    out = ("--out", "results", "--quiet", "--json")
    for box in ("box1", "box2"):
        assert vlm_ocr("run", f"{box}/contract.pdf", *out, cwd=tmp_path).returncode == 0
    # later, all three at once, in another order: each finds its own folder, and reuses it
    proc = vlm_ocr(
        "run", "box0/contract.pdf", "box1/contract.pdf", "box2/contract.pdf", *out, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(r) for r in re.split(r"(?m)^(?=\{)", proc.stdout) if r.strip()]
    assert [r["prefix"] for r in results] == ["contract-3", "contract", "contract-2"]
    assert [all(p["reused"] for p in r["pages"]) for r in results] == [False, True, True]
    for folder, first, pages in (("contract", 1, 3), ("contract-2", 11, 2), ("contract-3", 21, 2)):
        text = (tmp_path / "results" / folder / "document.md").read_text()
        assert reference(first) in text and text.count("<!-- page") == pages, folder


def test_out_must_be_a_folder_named_before_the_engine_starts(tmp_path: Path) -> None:
    write_pdf(tmp_path / "two.pdf", 2)
    (tmp_path / "afile").write_text("not a folder\n")
    accepted = "accepted: a folder to write the results in (made if it is not there)"
    said = {
        "": "--out: '' is empty (an unset shell variable?); ",
        "afile": "--out: afile is a file, not a folder; ",
        "afile/sub": f"--out: {tmp_path / 'afile'} is a file, so afile/sub cannot be made; ",
    }
    for out, line in said.items():
        proc = vlm_ocr("run", "two.pdf", "--out", out, cwd=tmp_path)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr == f"vlm-ocr run: {line}{accepted}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "two.pdf"]  # nothing written


def test_pages_with_images_alone_is_refused(tmp_path: Path) -> None:
    (tmp_path / "scan.png").write_bytes(png_bytes(page_image(["Invoice 42"])))
    proc = vlm_ocr("run", "scan.png", "--pages", "2", "--out", "results", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (
        "vlm-ocr run: --pages: selects pages of PDFs, and no file given is a PDF; an image is "
        "read whole: leave --pages out\n"
    )
    assert not (tmp_path / "results").exists()


def test_a_fax_of_several_pages_is_read_page_by_page_and_left_as_it_was(tmp_path: Path) -> None:
    frames = [page_image([reference(n)]).convert("1") for n in (1, 2, 3)]
    fax = tmp_path / "fax.tif"
    frames[0].save(fax, save_all=True, append_images=frames[1:], compression="group4")
    sent = fax.read_bytes()
    proc = vlm_ocr("run", "fax.tif", "--pages", "2-", "--out", "results", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("fax.tif: 2/2 pages ok")
    for n in (2, 3):
        assert reference(n) in (tmp_path / f"results/fax/page-{n:04d}.md").read_text()
    assert fax.read_bytes() == sent  # the worker made a PDF of its own copy, not of the file


def test_ctrl_c_stops_in_one_line_and_the_same_command_goes_on(tmp_path: Path) -> None:
    write_pdf(tmp_path / "long.pdf", 8)
    command = [sys.executable, "-m", "vlm_ocr", "run", "long.pdf", "--out", "results"]
    proc = subprocess.Popen(
        foreground([*command, "--progress-every", "0"]),
        cwd=tmp_path,
        env=worker_environ(MAX_PIXELS=str(TEST_PIXELS)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own group, as a terminal's foreground job is
    )
    try:
        assert proc.stderr is not None
        before = []
        for line in proc.stderr:  # the first page stored: Ctrl-C, to every process of the group
            before.append(line)
            if line.startswith("vlm-ocr run: 1/8 pages"):
                os.killpg(proc.pid, signal.SIGINT)
                break
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, "".join(before) + err
    assert out == "" and "Traceback" not in err and "KeyboardInterrupt" not in err, err
    said = re.fullmatch(
        r"vlm-ocr run: interrupted: (\d+) of 8 pages stored; run the same command again to go "
        r"on \(the pages stored are reused, not read again\); stopping the engine(?:, dropping "
        r"the 1 page in hand)? \(Ctrl-C again leaves at once\)\n",
        err,
    )
    assert said and int(said[1]) >= 1, err
    stored = len(list((tmp_path / "results/long").glob("page-*.md")))
    assert stored >= int(said[1])
    # the manifest lists the pages done and the rest as not processed: show and review find them
    manifest = json.loads((tmp_path / "results/long/manifest.json").read_text())
    done = [p["page"] for p in manifest["pages"] if p["status"] == "ok"]
    assert len(done) == stored and manifest["status"] == "partial" and manifest["retry"]
    assert manifest["error"] == (
        f"the job was stopped (cancelled, or out of time): {stored} of 8 pages stored, the rest "
        "not processed; submitting it again reads only the pages missing"
    )
    assert {p["error_stage"] for p in manifest["pages"] if p["page"] not in done} == {"stopped"}
    assert [p["page"] for p in manifest["pages"]] == list(range(1, 9))
    again = subprocess.run(
        [*command, "--json", "--quiet"],
        cwd=tmp_path,
        env=worker_environ(MAX_PIXELS=str(TEST_PIXELS)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert again.returncode == 0, again.stderr[-3000:]
    result = json.loads(again.stdout)
    assert result["totals"]["ok"] == 8 and result["totals"]["reused"] >= stored


def test_the_summary_says_the_jobs_notes_after_its_pages() -> None:
    note = "max_pixels 9,000,000 is above this worker's page budget"
    result = JobResult(
        job_id="j",
        status="ok",
        prefix="poster",
        manifest_key="poster/manifest.json",
        pages=[
            PageReport(page=1, source="poster.pdf", status="ok", key="poster/page-0001.md"),
            PageReport(page=2, source="poster.pdf", status="ok", key="poster/page-0002.md"),
        ],
        totals=Totals(pages=2, ok=2, reused=1),
        timings={"total_s": 1.0},
        notes=[note, "page 1 is large (…): the job's `max_pixels` up to the worker's MAX_PIXELS"],
    )
    lines = summary(Path("poster.pdf"), result, lambda key: f"file:///r/{key}").splitlines()
    assert lines[0].startswith("poster.pdf: 2/2 pages ok (1 reused from an earlier run), ")
    assert lines[4:] == [
        "  note: max_pixels 9,000,000 is above this worker's page budget",
        "  note: page 1 is large (…): `--max-pixels` up to the worker's MAX_PIXELS",
    ]


def test_max_pixels_above_the_default_starts_the_runs_engine_with_it(tmp_path: Path) -> None:
    poster = pymupdf.open()  # 40 by 30 inches: at the test budget, small print is lost
    poster.new_page(width=2880, height=2160).insert_text((72, 72), "Poster notes.", fontsize=10)
    (tmp_path / "poster.pdf").write_bytes(poster.tobytes())
    asked = 4 * TEST_PIXELS
    proc = vlm_ocr("run", "poster.pdf", "--max-pixels", str(asked), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout)
    [page] = result["pages"]
    assert 0.95 < page["width"] * page["height"] / asked < 1.01  # not the default's budget
    assert not [n for n in result.get("notes", []) if "above this worker's" in n], result["notes"]


def test_a_pipe_is_said_to_be_one_and_to_be_saved_first(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "scan.pdf")  # what `<(…)` and /dev/stdin in a pipeline are
    proc = vlm_ocr("run", "scan.pdf", "--out", "results", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == (
        "vlm-ocr run: scan.pdf: not a regular file (a pipe); save it to a file first and give "
        "that; accepted: PDF, PNG, JPEG, WebP or TIFF files (.pdf, .png, .jpg, .webp, .tif, …)\n"
    )


def test_out_that_cannot_be_written_is_said_by_its_option_for_root_too(tmp_path: Path) -> None:
    write_pdf(tmp_path / "two.pdf", 2)
    folder, why = unwritable_folder(tmp_path)
    for out in (folder, folder / "results"):
        proc = vlm_ocr("run", "two.pdf", "--out", str(out), cwd=tmp_path)
        assert proc.returncode == 2 and proc.stdout == ""
        assert proc.stderr == (
            f"vlm-ocr run: --out: {folder} cannot be written ({why}); accepted: a folder to "
            "write the results in (made if it is not there)\n"
        )


def test_a_file_given_twice_is_read_once(tmp_path: Path) -> None:
    write_pdf(tmp_path / "one.pdf", 1)
    (tmp_path / "sub").mkdir()
    proc = vlm_ocr(
        "run", "one.pdf", "sub/../one.pdf", "one.pdf", "--out", "results", "--progress-every",
        "0", cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [line for line in proc.stderr.splitlines() if line.startswith("vlm-ocr run: ")]
    assert said[0] == (
        "vlm-ocr run: note: one.pdf: given 3 times (also as sub/../one.pdf); read once"
    )
    assert said[1:] and all(re.match(r"vlm-ocr run: [01]/1 pages ", line) for line in said[1:])
    assert proc.stdout.count("one.pdf: ") == 1 and "reused" not in proc.stdout, proc.stdout
    assert job_folders(tmp_path / "results") == ["one"]


def test_a_folder_is_refused_with_the_files_in_it_to_give_instead(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    scans = tmp_path / "my scans"
    write_pdf(scans / "a.pdf", 1)
    write_pdf(scans / "B.PDF", 1)
    (scans / "scan.png").write_bytes(png_bytes(page_image(["Invoice 42"])))
    (scans / ".DS_Store").write_text("not given by the shell's * either\n")
    folder = shlex.quote(str(scans))
    submit = "(vlm-ocr submit walks folders, over an endpoint's workers)"
    assert check_file(scans, None, settings) == (
        f"{scans}: a folder, not a file; it holds 3 PDFs and images: give them, e.g. "
        f"vlm-ocr run {folder}/* {submit}"
    )
    # beside what is refused (a text, a subfolder), a pattern for each extension read
    (scans / "notes.txt").write_text("meeting notes\n")
    (scans / "old").mkdir()
    assert check_file(scans, None, settings) == (
        f"{scans}: a folder, not a file; it holds 3 PDFs and images: give them, e.g. "
        f"vlm-ocr run {folder}/*.PDF {folder}/*.pdf {folder}/*.png {submit}"
    )
    assert check_file(scans / "old", None, settings) == (
        f"{scans / 'old'}: a folder, not a file; accepted: PDF, PNG, JPEG, WebP or TIFF files "
        "(.pdf, .png, .jpg, .webp, .tif, …), of which it holds none"
    )


def test_a_bucket_that_cannot_be_reached_is_said_as_its_settings_before_the_engine_starts(
    tmp_path: Path,
) -> None:
    write_pdf(tmp_path / "lease.pdf", 1)
    endpoint = f"http://127.0.0.1:{free_port()}"  # bound, read and closed: nothing listens
    bucket = {
        "BUCKET_NAME": "b",
        "BUCKET_ENDPOINT_URL": endpoint,
        "BUCKET_ACCESS_KEY_ID": "key",
        "BUCKET_SECRET_ACCESS_KEY": "secret",
        "BUCKET_PREFIX": "runs/2026",
        "BUCKET_MAX_ATTEMPTS": "1",
    }
    proc = vlm_ocr("run", "lease.pdf", cwd=tmp_path, **(SPARE_LIMITS_ENV | bucket))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines()[-1] == (
        "vlm-ocr run: the settings cannot work: GET s3://b/runs/2026/lease/manifest.json: the "
        "bucket could not be reached (EndpointConnectionError); the results go to the bucket the "
        f"settings name (BUCKET_NAME=b at BUCKET_ENDPOINT_URL={endpoint}, under "
        "BUCKET_PREFIX=runs/2026, with BUCKET_ACCESS_KEY_ID and BUCKET_SECRET_ACCESS_KEY): mend "
        "them, or give --out DIR to write the results to a local folder"
    )
    assert "engine ready" not in proc.stderr  # said before the engine's start, not after it


def test_a_file_whose_name_is_no_utf8_is_read_and_named_with_its_bytes_replaced(
    tmp_path: Path,
) -> None:
    # a name made on a system of another encoding: its job, its manifest and its line are text
    name = os.fsdecode(b"scan-\xff\xfe.png")
    page_image([reference(1)]).save(tmp_path / name)
    proc = vlm_ocr("run", name, "--out", "results", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((tmp_path / "results/scan/manifest.json").read_text(encoding="utf-8"))
    assert [p["source"] for p in manifest["pages"]] == ["scan-\\xff\\xfe.png"]
    assert reference(1) in (tmp_path / "results/scan/page-0001.md").read_text()
