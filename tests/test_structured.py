"""Structured output: a job's JSON schema, guided decoding, validation before storing, retries,
and the CPU engine's refusal. The request path through the real server is in
test_engine_vllm.py."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from vlm_ocr import samples
from vlm_ocr.contract import JobInput
from vlm_ocr.engines.chat_client import ChatClient, Completion
from vlm_ocr.engines.families.qwen import QwenVl
from vlm_ocr.engines.vlm import ExternalServer, VlmEngine
from vlm_ocr.errors import InputError
from vlm_ocr.images import Budget
from vlm_ocr.pipeline.render import pdf_page_image
from vlm_ocr.prompts import resolve
from vlm_ocr_lab.standins.fakes import FakeEngine

from .support import b64, make_settings, new_worker, pdf_job, run_job

INVOICE = {
    "type": "object",
    "properties": {
        "vendor": {"type": "string"},
        "total": {"type": "number"},
        "currency": {"enum": ["EUR", "USD", "TWD"]},
    },
    "required": ["vendor", "total", "currency"],
    "additionalProperties": False,
}
PDF = b64(samples.pdf_from_pages([["Invoice 7", "ACME Ltd", "Total 12.50 EUR"]]))


def nested(levels: int) -> dict:
    schema: dict = {"type": "object"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


@pytest.mark.parametrize(
    ("schema", "extra", "says"),
    [
        ({"type": "object", "properties": {"a": {"type": "nope"}}}, {}, "not a valid JSON Schema"),
        ({"type": "array"}, {}, '"type": "object"'),
        (INVOICE, {"prompt": "markdown"}, "with `json_schema` leave `prompt` out"),
        ({"type": "object", "description": "x" * 20_001}, {}, "over 20,000 characters"),
        # small, but deep enough to exhaust a recursive validator (a traceback before this check)
        (nested(300), {}, "nested more than 32 objects and lists deep"),
        (nested(100), {}, "nested more than 32 objects and lists deep"),
    ],
)
def test_a_bad_schema_is_an_input_error(schema: dict, extra: dict, says: str) -> None:
    with pytest.raises(InputError) as err:
        JobInput.parse({"pdf": {"base64": PDF}, "json_schema": schema, **extra})
    assert says in str(err.value) and str(err.value).startswith(
        ("input.json_schema", "input.prompt")
    )


def test_a_schema_of_a_real_forms_depth_is_taken() -> None:
    JobInput.parse({"pdf": {"base64": PDF}, "json_schema": nested(12)})


def test_the_cpu_engine_refuses_json_jobs(run) -> None:
    result = run({"pdf": {"base64": PDF}, "json_schema": INVOICE})
    assert result.status == "failed" and not result.pages
    assert (result.error or "").startswith("input.json_schema: the rapidocr engine")
    assert "ENGINE=vllm" in (result.error or "")


def test_the_schema_travels_with_the_request_and_keys_the_fingerprint() -> None:
    prompt = resolve(None, None, "markdown", INVOICE)
    body = ChatClient.request_body("m", [], temperature=0, max_tokens=5, schema=INVOICE)
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "page", "schema": INVOICE, "strict": True},
    }
    assert '"vendor"' in prompt.text and prompt.name == "extract-json+json"
    other = resolve(None, None, "markdown", {**INVOICE, "required": ["vendor"]})
    assert other.version != prompt.version  # a page read with another schema is not reused
    assert resolve(None, "Read the invoice.", "markdown", INVOICE).text.startswith("Read the")


def engine_answering(answers: list[str]) -> VlmEngine:
    settings = make_settings(max_attempts=3)
    engine = VlmEngine(
        settings.vlm,
        settings.model,
        ExternalServer("http://127.0.0.1:9"),
        family=QwenVl(),
        concurrency=1,
    )
    engine.client = object()  # type: ignore[assignment]  (ask is replaced below)

    async def ask(png: bytes, prompt: Any, attempt: Any, seed: int = 0, **kw: Any):
        return Completion(answers.pop(0), "stop", 10, 5)

    engine.ask = ask  # type: ignore[method-assign]
    return engine


def test_invalid_json_is_asked_again_then_fails_clearly() -> None:
    page = pdf_page_image(samples.pdf_from_pages([["x"]]), 1, Budget(300_000))
    prompt = resolve(None, None, "markdown", INVOICE)
    good = '{"vendor": "ACME Ltd", "total": 12.5, "currency": "EUR"}'
    rec = asyncio.run(engine_answering(["{not json", good]).recognize(page, prompt))
    assert rec.ok and rec.attempts == 2 and json.loads(rec.text)["total"] == 12.5
    bad = '{"vendor": "ACME Ltd", "total": "12.50", "currency": "EUR"}'
    rec = asyncio.run(engine_answering([bad] * 3).recognize(page, prompt))
    assert not rec.ok and rec.attempts == 3
    assert rec.problem and rec.problem.startswith("invalid JSON for json_schema (at total:")
    assert "on all 3 attempts" in rec.problem


def test_json_pages_are_stored_as_json_and_blank_pages_as_null(tmp_path, loop, cpu_pool) -> None:
    # Every page answered with the same invoice JSON, as a guided engine would.
    invoice = '{\n  "vendor": "ACME Ltd",\n  "total": 12.5,\n  "currency": "EUR"\n}'
    engine = FakeEngine(lambda page, prompt: invoice, json_output=True)
    worker = new_worker(loop, make_settings(tmp_path), engine, cpu_pool)
    pages = [["Invoice 7", "ACME Ltd", "Total 12.50 EUR"], []]  # the second page is blank
    result = run_job(loop, worker, pdf_job(pages, "inv/7") | {"json_schema": INVOICE})
    assert result.status == "ok", result
    first, blank = result.pages
    assert first.key == "inv/7/page-0001.json" and blank.status == "blank"
    stored = json.loads((tmp_path / "out/inv/7/page-0001.json").read_text())
    assert stored == {"vendor": "ACME Ltd", "total": 12.5, "currency": "EUR"}
    assert json.loads((tmp_path / "out/inv/7/page-0002.json").read_text()) is None
    assert engine.prompts[0].schema == INVOICE
    assert result.fingerprint["prompt_version"].startswith("1+")
