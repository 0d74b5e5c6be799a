"""The wire: what the worker streams and returns is what `vlm-ocr submit` reads back, model for
model; no field is copied by hand on either side."""

from __future__ import annotations

import json
from typing import Any

from vlm_ocr import samples
from vlm_ocr.client.submit import DocumentManifest, Part, _ending
from vlm_ocr.contract import (
    FailedItem,
    JobResult,
    PageItem,
    PageReport,
    ResultItem,
    Totals,
    final_item,
    read_item,
)

from .support import b64, run_job


def over_the_wire(item: Any) -> Any:
    """As JSON travels from the handler (exclude_none) to the client."""
    return json.loads(json.dumps(item.model_dump(mode="json", exclude_none=True)))


def every_field_set() -> PageReport:
    values: dict[str, Any] = {}
    for name, field in PageReport.model_fields.items():
        kind = str(field.annotation)
        if "Literal" in kind:
            values[name] = "ok"
        elif "dict[str, bool]" in kind:
            values[name] = {"table": True}
        elif "dict" in kind:
            values[name] = {"render_s": 0.5}
        elif "list" in kind:
            values[name] = ["number: 1 ≠ 7"]
        elif "bool" in kind:
            values[name] = True
        elif "float" in kind:
            values[name] = 0.75
        elif "int" in kind:
            values[name] = 3
        else:
            values[name] = f"{name}-value"
    return PageReport(**values)


def test_a_page_report_survives_the_wire_with_every_field() -> None:
    page = every_field_set()
    assert all(getattr(page, name) is not None for name in PageReport.model_fields)
    item = PageItem(done=1, total=2, page=page)
    assert read_item(over_the_wire(item)) == item


def test_what_a_job_streams_is_what_the_client_reads(loop, worker) -> None:
    pages = samples.numbered_pages(3, lines=2)
    job = {"pdf": {"base64": b64(samples.pdf_from_pages(pages))}, "output_prefix": "wire"}
    streamed: list[PageItem] = []
    result = loop.run(worker.run("wire-1", job, streamed.append))
    assert result.status == "ok" and len(streamed) == 3
    wire = [over_the_wire(item) for item in [*streamed, final_item(result)]]
    # the client reads the stream item by item, and the job's outcome from its last item
    assert [read_item(raw) for raw in wire[:-1]] == streamed
    received, error = _ending(wire)
    assert error is None and received == result
    # its document manifest is made of the same reports, counted the same way
    manifest = DocumentManifest(
        endpoint="e",
        source_key="k",
        source_sha256="0",
        prefix="p",
        manifest_key="p/document.json",
        page_count=3,
        pages_per_job=3,
        parts=[Part(first=1, last=3, job_ids=["wire-1"], status="ok")],
    )
    manifest.outcome(manifest.parts[0], received.pages)
    manifest.summarise()
    assert manifest.complete
    counts = manifest.totals.model_dump(exclude={"jobs", "submissions", "not_read"})
    assert counts == Totals.of(result.pages).model_dump()
    assert manifest.totals.not_read == 0  # every page came back, ok or not
    assert [p.model_copy(update={"text": None}) for p in result.pages] == manifest.pages


def test_a_refused_job_is_a_result_of_the_same_shape(run) -> None:
    refused = run({"pdf": {"url": "ftp://x"}})
    assert isinstance(refused, JobResult) and refused.status == "failed"
    assert refused.pages == [] and refused.totals == Totals() and not refused.retry
    assert final_item(refused) == FailedItem(error=refused.error or "")
    assert _ending([over_the_wire(final_item(refused))]) == (None, refused.error)


def test_a_job_that_completes_ends_with_its_result(loop, worker) -> None:
    result = run_job(loop, worker, {"images": [{"base64": "%%%"}]})
    assert result.status == "failed"  # nothing stored: RunPod marks it failed
    assert isinstance(final_item(result), FailedItem)
    ok = result.model_copy(update={"status": "partial", "error": "page 1: not an image"})
    assert final_item(ok) == ResultItem(result=ok)
    assert read_item(over_the_wire(final_item(ok))) == ResultItem(result=ok)
