"""What the tests share: settings built from nothing but what a test names, workers on the
session's loop, real pages and PDFs, and the handler under the RunPod SDK's local API server.

Test modules import helpers from here, never from each other; fixtures live in conftest.py.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pymupdf
import pytest
from PIL import Image

from vlm_ocr import samples
from vlm_ocr.contract import JobResult
from vlm_ocr.entry.runtime import WorkerLoop
from vlm_ocr.loopback import free_port
from vlm_ocr.pipeline.cpu_pool import CpuPool
from vlm_ocr.pipeline.textsim import similarity
from vlm_ocr.pipeline.worker import Worker, build_worker
from vlm_ocr.settings import Settings
from vlm_ocr_lab.standins import local_endpoint

ROOT = Path(__file__).resolve().parents[2]
# Small pages keep the CPU engine quick; text at this budget still reads cleanly.
TEST_PIXELS = 700_000
# The product's time limits a test does not test, set far past what a busy machine takes (a
# test waits for its event, never on a budget of the product's): a page's render and the CPU
# engine's readings (second opinion, orientation, layout) and the searchable PDF's pages under
# RENDER_TIMEOUT_S, a URL's download, the bucket's connections and reads. A test of a limit
# names its own value.
SPARE_LIMITS: dict[str, float] = {
    "render_timeout_s": 1800.0,
    "download_timeout_s": 900.0,
    "bucket_connect_timeout_s": 300.0,
    "bucket_read_timeout_s": 900.0,
}
# The same, for a worker process a test starts.
SPARE_LIMITS_ENV = {name.upper(): f"{value:g}" for name, value in SPARE_LIMITS.items()}

__all__ = ["ROOT", "SPARE_LIMITS_ENV", "TEST_PIXELS", "free_port", "wait_for_http"]
wait_for_http = local_endpoint.wait_for_http


def make_settings(tmp_path: Path | None = None, **values: Any) -> Settings:
    """Settings from nothing but these values (the environment is never read): results in
    `tmp_path/out`, small pages, the spare time limits, and orientation off except where a
    test is about it (it costs a second of CPU per scanned page and processes of its own)."""
    base: dict[str, Any] = {"max_pixels": TEST_PIXELS, "auto_rotate": False} | SPARE_LIMITS
    if tmp_path is not None:
        base["output_dir"] = tmp_path / "out"
    return Settings(**(base | values))


def new_worker(
    loop: WorkerLoop, settings: Settings, engine: Any, pool: CpuPool, store: Any = None
) -> Worker:
    """A worker on the session's loop and render pool, with the store the settings select
    (or `store`)."""
    return build_worker(settings, engine, pool=pool, store=store)


def run_job(loop: WorkerLoop, worker: Worker, job: Any, job_id: str = "job-1") -> JobResult:
    return loop.run(worker.run(job_id, job))


def gather(loop: WorkerLoop, coros: list[Coroutine[Any, Any, Any]]) -> list[Any]:
    async def all_of() -> list[Any]:
        return await asyncio.gather(*coros)

    return loop.run(all_of())


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def png_bytes(image: Image.Image, fmt: str = "PNG", **kw: Any) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format=fmt, **kw)
    return buf.getvalue()


def page_image(paragraphs: list[str]) -> Image.Image:
    """A real rendered page (via PyMuPDF) as a Pillow image."""
    doc = pymupdf.open(stream=samples.pdf_from_pages([paragraphs]), filetype="pdf")
    pix = doc[0].get_pixmap(dpi=100, alpha=False)
    return Image.frombytes("RGB", (pix.width, pix.height), pix.samples)


def fax(lines: list[str]) -> bytes:
    """A multi-page TIFF in Group 4, as a fax or a scanner's batch is, one line a page."""
    frames = [page_image([line]).convert("1") for line in lines]
    out = io.BytesIO()
    frames[0].save(out, "TIFF", save_all=True, append_images=frames[1:], compression="group4")
    return out.getvalue()


FAX = ["Fax page one: the order.", "Fax page two: the terms.", "Fax page three: signed."]


def fax_with_a_huge_page() -> bytes:
    """A few kB of TIFF whose second page is 144 MP once decoded."""
    small, huge = Image.new("1", (1000, 1000), 1), Image.new("1", (12_000, 12_000), 1)
    out = io.BytesIO()
    small.save(out, "TIFF", save_all=True, append_images=[huge], compression="group4")
    return out.getvalue()


def write_pdf(path: Path, pages: int, first: int = 1, lines: int = 2) -> Path:
    """A PDF of `numbered_pages` at `path` (its folders made): each page's text its own."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(
        samples.pdf_from_pages(samples.numbered_pages(pages, lines=lines, first=first))
    )
    return path


def pdf_job(pages: list[list[str]], prefix: str) -> dict[str, Any]:
    return {"pdf": {"base64": b64(samples.pdf_from_pages(pages))}, "output_prefix": prefix}


def stored_text(settings: Settings, key: str | None) -> str:
    assert key, "the page has no stored text"
    return (settings.job.output_dir / key).read_text(encoding="utf-8")


def run_sixteen_jobs(
    loop: WorkerLoop, worker: Worker, prefix: str, read: Callable[[str], str]
) -> None:
    """16 two-page jobs at once on one worker; every stored page must hold its own page's text
    (each page carries a code unique across all jobs, so a mix-up between jobs shows too)."""
    docs = {j: samples.numbered_pages(2, lines=2) for j in range(16)}
    for j, pages in docs.items():
        for n, page in enumerate(pages):
            page.insert(0, f"Job {j} sheet {n + 1} code {j * 1000 + n * 17 + 4242}")
    jobs = [worker.run(f"job-{j}", pdf_job(pages, f"{prefix}/{j}")) for j, pages in docs.items()]
    for j, result in enumerate(gather(loop, jobs)):
        assert result.status == "ok", result.error
        for page, truth in zip(result.pages, docs[j], strict=True):
            text = read(page.key or "")
            assert similarity(text, samples.page_text(truth)) >= 0.9, (j, text)


# Run by the interpreter before it execs the command: SIGINT at its default and let through, as
# a terminal starts a foreground command. An ignored SIGINT outlives exec, and a suite started in
# the background of a non-interactive shell (`make test &` in a script) has it ignored: a handler
# started from it heard no Ctrl-C until its own handler was set.
_FOREGROUND = (
    "import os, signal, sys; "
    "signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT}); "
    "os.execv(sys.argv[1], sys.argv[1:])"
)


def foreground(argv: list[str]) -> list[str]:
    """`argv` (its program a path) started as a terminal's Ctrl-C finds a command: Popen it."""
    return [sys.executable, "-c", _FOREGROUND, *argv]


def handler_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """The environment of a worker process: no setting of the developer's shell, results in
    `tmp_path/out`, the SDK quiet, the spare time limits, plus `extra`."""
    return local_endpoint.worker_environ(
        **SPARE_LIMITS_ENV
        | {"OUTPUT_DIR": str(tmp_path / "out"), "RUNPOD_LOG_LEVEL": "ERROR"}
        | extra
    )


def alive(pid: int) -> bool:
    """Running, not a zombie (a zombie has exited; its parent has not waited for it yet)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().split(b")")[-1].split()[0]
    except (OSError, IndexError):
        return False
    return state != b"Z"


def start_api(
    env: dict[str, str], *, timeout_s: float, **popen: Any
) -> tuple[subprocess.Popen[Any], str]:
    """`handler.py --rp_serve_api` (the RunPod SDK's local API server) on a free loopback port,
    answering: the process and its URL."""
    return local_endpoint.start_api(ROOT / "handler.py", env, timeout_s=timeout_s, **popen)


# --- files that are hard to make by hand --------------------------------------------------------


def pdf_with_zero_pages() -> bytes:
    objs = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [] /Count 0 >>"]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for i, body in enumerate(objs, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 3\n0000000000 65535 f \n"
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size 3 /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % xref
    return bytes(out)


SIDEWAYS = [
    "Schedule B: the rent for each year of the lease.",
    "The tenant pays it on the first day of each month.",
    "A late payment bears interest at two per cent.",
]


def sideways_pdf(turns: list[int], displayed: int = 0) -> bytes:
    """A PDF with a text layer whose pages hold SIDEWAYS set at each of `turns` (degrees
    counter-clockwise, as a table turned to fit the page is), each page shown turned
    `displayed` degrees clockwise (its /Rotate)."""
    doc = pymupdf.open()
    for turn in turns:
        page = doc.new_page(width=595, height=842)
        box = pymupdf.Rect(72, 72, 523, 770)
        page.insert_textbox(box, "\n".join(SIDEWAYS), fontsize=14, rotate=turn)
        page.set_rotation(displayed)
    return doc.tobytes()


def encrypted_pdf() -> bytes:
    doc = pymupdf.open(stream=samples.pdf_from_pages([["secret"]]), filetype="pdf")
    return doc.tobytes(encryption=pymupdf.PDF_ENCRYPT_AES_256, owner_pw="o", user_pw="u")


def write_safetensors(path: Path, floats: int) -> None:
    header = json.dumps({"w": {"dtype": "F32", "shape": [floats], "data_offsets": [0, 4 * floats]}})
    raw = header.encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * (4 * floats))


def make_snapshot(folder: Path, config: dict[str, Any] | None = None) -> Path:
    """A model folder as the hub client lays one out: config, tokenizer, two indexed shards."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config or {"model_type": "qwen3_vl"}))
    (folder / "tokenizer.json").write_text("{}")
    write_safetensors(folder / "model-00001-of-00002.safetensors", 1000)
    write_safetensors(folder / "model-00002-of-00002.safetensors", 500)
    index = {
        "metadata": {"total_size": 6000},
        "weight_map": {
            "a": "model-00001-of-00002.safetensors",
            "b": "model-00002-of-00002.safetensors",
        },
    }
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    return folder


def unwritable_folder(tmp_path: Path) -> tuple[Path, str]:
    """A folder this process cannot write in, and what the system says to a write there: one
    without write permission, or for root, whom permissions do not stop (os.access says yes to
    it), a folder of the kernel's own."""
    folder = Path("/sys/kernel")
    if os.geteuid() != 0:
        folder = tmp_path / "locked"
        folder.mkdir()
        folder.chmod(0o555)
    try:
        tempfile.NamedTemporaryFile(dir=folder).close()
    except OSError as exc:
        return folder, exc.strerror
    pytest.skip(f"{folder} can be written here: no folder refuses this process")
