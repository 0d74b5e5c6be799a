"""`vlm-ocr run` and `vlm-ocr-lab bench` as a user runs them."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from vlm_ocr import samples
from vlm_ocr.pipeline.textsim import similarity
from vlm_ocr_lab.standins.local_endpoint import worker_environ

from .support import SPARE_LIMITS_ENV, TEST_PIXELS


def cli(
    *args: str, tmp: Path, package: str = "vlm_ocr", **env: str
) -> subprocess.CompletedProcess[str]:
    env = worker_environ(**SPARE_LIMITS_ENV, MAX_PIXELS=str(TEST_PIXELS), **env)
    return subprocess.run(
        [sys.executable, "-m", package, *args],
        cwd=tmp,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_run_local_pdf_to_folder(tmp_path: Path) -> None:
    pages = samples.numbered_pages(2, lines=3)
    (tmp_path / "Case 42.pdf").write_bytes(samples.pdf_from_pages(pages))
    proc = cli("run", "Case 42.pdf", "--out", "results", tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "2/2 pages ok" in proc.stdout
    for n, truth in enumerate(pages, 1):
        text = (tmp_path / f"results/Case_42/page-000{n}.md").read_text()
        assert similarity(text, samples.page_text(truth)) >= 0.9
    assert (tmp_path / "results/Case_42/manifest.json").is_file()
    # Its review without the document asks for the file it read, which nobody sent anywhere.
    proc = cli("review", "results/Case_42", "-o", "review.html", tmp=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (
        "  no page pictures: the job read Case 42.pdf, and the worker keeps no copy of a job's "
        "input; give the file it read: --pdf FILE\n"
    ) in proc.stdout


def test_run_reports_missing_file(tmp_path: Path) -> None:
    proc = cli("run", "nope.pdf", tmp=tmp_path)
    assert proc.returncode == 2 and "nope.pdf: no such file" in proc.stderr


def test_bench_prints_figures_and_its_progress_with_the_cpu_engine(tmp_path: Path) -> None:
    # a line an hour, and one at the first page: that one, whatever the machine's pace
    args = ("bench", "--pages", "2", "--jobs", "2", "--progress", "3600")
    proc = cli(*args, tmp=tmp_path, package="vlm_ocr_lab", ENGINE="rapidocr")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "engine: rapidocr" in proc.stdout and "pages/s:" in proc.stdout
    for stage in ("render_s", "engine_s", "store_s"):
        assert stage in proc.stdout
    # The progress counts the pages the worker ends, not an engine's requests: the CPU engine,
    # which sends none, reports too.
    lines = [line for line in proc.stdout.splitlines() if line.startswith("progress, ")]
    said = (
        r"progress, worker pass 1: 1 of 4 pages at [\d.]+ s \([\d.]+ a second, about \d+ s left\)"
    )
    assert lines and re.fullmatch(said, lines[0]), proc.stdout


def test_bench_passes_are_each_reported_on_pages_new_to_the_engine(tmp_path: Path) -> None:
    out = tmp_path / "results"
    proc = cli(
        "bench",
        "--pages",
        "2",
        "--passes",
        "2",
        "--out",
        str(out),
        tmp=tmp_path,
        package="vlm_ocr_lab",
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "pass 1: pages: 2  failed: 0" in proc.stdout
    assert "pass 2: pages: 2  failed: 0" in proc.stdout
    # Each pass stored its own pages, read by the engine: none was reused from the first pass.
    texts = sorted(p.read_text() for p in out.rglob("page-*.md"))
    assert len(texts) == 4 and len(set(texts)) == 4


def test_an_engine_that_does_not_answer_is_one_line_naming_its_setting(tmp_path: Path) -> None:
    from vlm_ocr.loopback import free_port

    (tmp_path / "one.pdf").write_bytes(samples.pdf_from_pages(samples.numbered_pages(1)))
    url = f"http://127.0.0.1:{free_port()}/v1"  # a loopback port nothing listens on
    proc = cli("run", "one.pdf", "--out", "r", tmp=tmp_path, ENGINE="openai", OPENAI_BASE_URL=url)
    said = proc.stderr.strip().splitlines()[-1]
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert said.startswith("vlm-ocr run: the engine did not start or answer: warm-up page failed")
    assert f"OPENAI_BASE_URL={url}" in said and "Traceback" not in proc.stderr
