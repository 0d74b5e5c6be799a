"""`vlm-ocr-lab eval`: scoring against ground truth, and comparing two outputs for legal text."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from vlm_ocr import samples
from vlm_ocr.contract import JobResult, PageReport
from vlm_ocr.pipeline.compare import critical_differences
from vlm_ocr.pipeline.textsim import clean, similarity
from vlm_ocr_lab.cli import parser
from vlm_ocr_lab.evaluate import compare, eval_main, load_outputs

from .support import make_settings, page_image, png_bytes

ROOT = Path(__file__).resolve().parents[1]


def test_clean_keeps_reading_content_only() -> None:
    md = (
        "# 第一條\n\n| a | b |\n|---|---|\n| **得** | <td>應</td> |\n"
        "[link](https://x.y/z) $\\alpha + 1$"
    )
    assert clean(md) == "第一條ab得應link1"
    assert clean("Ｆｕｌｌ－ｗｉｄｔｈ １２３") == "Fullwidth123"


def test_similarity() -> None:
    assert similarity("第一條 本法", "# 第一條\n本法") == 1.0
    assert similarity("abcd", "abce") == 0.75
    assert similarity("", "") == 1.0 and similarity("abc", "") == 0.0


def test_critical_tokens_catch_article_and_modal_changes() -> None:
    a = "第十條 承租人應於期限內返還。第十一條 出租人得終止契約。第2項 不得轉租。"
    b = "第十條 承租人得於期限內返還。第十二條 出租人得終止契約。第2項 不得轉租。"
    diffs = critical_differences(a, b)
    kinds = {(d.kind, d.a, d.b) for d in diffs}
    assert ("article", "第十一條", "第十二條") in kinds
    assert ("modal", "應", "得") in kinds
    modal = next(d for d in diffs if d.kind == "modal")
    assert "承租人應於" in modal.context_a and "承租人得於" in modal.context_b
    assert critical_differences(a, a) == []
    assert critical_differences("不得", "得") == [critical_differences("不得", "得")[0]]
    assert critical_differences("不得", "得")[0].a == "不得"


def write_outputs(root: Path, texts: dict[str, str]) -> Path:
    for pid, text in texts.items():
        (root / pid).mkdir(parents=True, exist_ok=True)
        (root / pid / "page-0001.md").write_text(text)
    return root


def test_compare_folders_from_the_command_line(tmp_path: Path) -> None:
    a = write_outputs(tmp_path / "a", {"p1": "第一條 應繳納。", "p2": "Article 1 shall."})
    b = write_outputs(tmp_path / "b", {"p1": "第一條 得繳納。", "p2": "Article 1 shall."})
    run = [sys.executable, "-m", "vlm_ocr_lab", "eval", "--compare"]
    differ = subprocess.run([*run, str(a), str(b)], capture_output=True, text=True)
    assert differ.returncode == 1
    assert "CRITICAL TOKENS DIFFER" in differ.stdout and "modal: A '應'" in differ.stdout
    same = subprocess.run([*run, str(a), str(a)], capture_output=True, text=True)
    assert same.returncode == 0 and "mean agreement" in same.stdout.splitlines()[-1]
    report = compare(load_outputs(a), load_outputs(b))
    assert report["pages"][1] == {
        "id": "p2",
        "agreement": 1.0,
        "critical_ok": True,
        "differences": [],
    }


def test_eval_against_ground_truth_with_the_cpu_engine(tmp_path: Path) -> None:
    paragraphs = [samples.LEGAL_PAGES[0], samples.LEGAL_PAGES[1]]
    rows = []
    for n, paras in enumerate(paragraphs, 1):
        (tmp_path / f"p{n}.png").write_bytes(png_bytes(page_image(paras)))
        (tmp_path / f"p{n}.md").write_text(samples.page_text(paras))
        rows.append(
            {
                "image": f"p{n}.png",
                "truth": f"p{n}.md",
                "language": "zh-tw",
                "tags": ["legal"],
                "layout": "single_column",
            }
        )
    (tmp_path / "pages.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "vlm_ocr_lab",
            "eval",
            str(tmp_path / "pages.jsonl"),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    last = proc.stdout.splitlines()[-1]
    assert last.startswith("mean") and float(last.split()[-1]) >= 0.9
    assert "language zh-tw" in proc.stdout and "tag legal" in proc.stdout
    assert "tag layout:single_column" in proc.stdout
    report = json.loads((tmp_path / "out/report.json").read_text())
    assert report["engine"]["name"] == "rapidocr" and len(report["pages"]) == 2
    # stored outputs are scored again later without running any engine
    again = subprocess.run(
        [
            sys.executable,
            "-m",
            "vlm_ocr_lab",
            "eval",
            str(tmp_path / "pages.jsonl"),
            "--outputs",
            str(tmp_path / "out"),
            "--report",
            str(tmp_path / "again.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.stdout.splitlines()[-1] == last
    from_manifest = load_outputs(tmp_path / "out/p1/manifest.json")
    assert list(from_manifest) == ["page-0001"]


def eval_command(*argv: str, tmp_path: Path) -> int:
    """`vlm-ocr-lab eval` in this process, on settings from nothing but the test's folder."""
    args = parser().parse_args(["eval", *argv])
    return asyncio.run(eval_main(make_settings(tmp_path), args))


@pytest.fixture
def page_set(tmp_path: Path, monkeypatch) -> Path:
    """A folder with one good page set line's files, a job's folder, an empty folder, a file
    that is no manifest; the command runs in it."""
    (tmp_path / "p1.png").write_bytes(png_bytes(page_image(["Article 1 shall apply."])))
    (tmp_path / "p1.md").write_text("Article 1 shall apply.")
    write_outputs(tmp_path / "job", {"p1": "Article 1 shall apply."})
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.json").write_text("[1, 2]")
    monkeypatch.chdir(tmp_path)
    return tmp_path


GOOD = '{"image": "p1.png", "truth": "p1.md"}'
# (the page set's lines, or None for no file) and the rest of the command line -> what is said
EVAL_MISTAKES = [
    (None, ["missing.jsonl"], "PAGES: no such file: missing.jsonl; accepted: a page set's"),
    ([GOOD, '{"image": "p1.png"}'], [], "pages.jsonl:2: `truth` is missing or not a path"),
    ([GOOD, "not json"], [], "pages.jsonl:2: not JSON (Expecting value at column 1); accepted"),
    (['{"image": "p9.png", "truth": "p1.md"}'], [], "pages.jsonl:1: `image`: no such file: p9.png"),
    (['{"pdf": "p1.png", "truth": "p9.md"}'], [], "pages.jsonl:1: `truth`: no such file: p9.md"),
    ([GOOD], ["--outputs", "nowhere"], "--outputs: no such folder or manifest: nowhere"),
    (
        None,
        ["--compare", "nothere1", "nothere2"],
        "--compare: no such folder or manifest: nothere1",
    ),
    (None, ["--compare", "job", "doesnotexist"], "--compare: no such folder or manifest: does"),
    (None, ["--compare", "job", "empty"], "--compare: empty holds no job: no stored page text"),
    (None, ["--compare", "job", "notes.json"], "--compare: notes.json is not a job manifest"),
]


@pytest.mark.parametrize(
    ("lines", "argv", "said"), EVAL_MISTAKES, ids=[m[2][:40] for m in EVAL_MISTAKES]
)
def test_a_mistake_in_what_eval_is_given_is_one_line_naming_the_file_with_status_2(
    page_set: Path, capsys, lines: list[str] | None, argv: list[str], said: str
) -> None:
    if lines is not None:
        (page_set / "pages.jsonl").write_text("\n".join(lines) + "\n")
        argv = ["pages.jsonl", *argv]
    assert eval_command(*argv, tmp_path=page_set) == 2
    out, err = capsys.readouterr()
    assert err.startswith(f"vlm-ocr-lab eval: {said}") and err.count("\n") == 1, err
    assert out == ""  # no table, no "mean agreement" of nothing


def test_a_job_folder_compares_with_its_own_manifest_wherever_it_was_copied(
    tmp_path: Path, capsys
) -> None:
    job = tmp_path / "copied"  # the job's prefix was "j"
    job.mkdir()
    pages = []
    for n, text in enumerate(["第一條 應繳納。", "Article 2 shall."], 1):
        (job / f"page-{n:04d}.md").write_text(text)
        pages.append(PageReport(page=n, source="two.pdf", status="ok", key=f"j/page-{n:04d}.md"))
    (job / "document.md").write_text("第一條 應繳納。\n\nArticle 2 shall.")  # both pages
    result = JobResult(
        job_id="j", status="ok", prefix="j", manifest_key="j/manifest.json", pages=pages
    )
    (job / "manifest.json").write_text(result.model_dump_json())
    assert eval_command("--compare", str(job), str(job / "manifest.json"), tmp_path=tmp_path) == 0
    out = capsys.readouterr().out
    assert "missing in" not in out and "document" not in out
    assert out.splitlines()[-1].endswith("1.0000  critical tokens identical")
