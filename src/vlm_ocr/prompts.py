"""Prompt presets for the vision-language model.

Each preset carries a version. The version goes into the engine fingerprint, so changing a
preset's wording (and bumping its version) makes stored results of the old wording stale.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Prompt:
    name: str
    version: str
    text: str
    #: when set, the answer is JSON that validates against this schema (guided decoding)
    schema: dict[str, Any] | None = None
    #: what the answer is: Markdown, or Qwen-VL's document-parsing HTML (blocks with boxes)
    answer: str = "markdown"

    def for_schema(self, schema: dict[str, Any]) -> Prompt:
        """This prompt asking for JSON of `schema`; the schema's digest joins the version, so
        stored pages read with another schema are not reused."""
        encoded = json.dumps(schema, sort_keys=True, ensure_ascii=False)
        digest = hashlib.sha256(encoded.encode()).hexdigest()[:12]
        return Prompt(
            name=f"{self.name}+json",
            version=f"{self.version}+{digest}",
            text=f"{self.text}\n\nJSON Schema of the answer:\n{encoded}",
            schema=schema,
        )

    @classmethod
    def custom(cls, text: str) -> Prompt:
        digest = hashlib.sha256(text.encode()).hexdigest()[:12]
        return cls(name="custom", version=digest, text=text)


LEGAL_ZH_TW = """\
你是一位精確的文件轉錄員。請將這一頁繁體中文法律文件逐字轉錄為 Markdown。
規則：
1. 只轉錄本頁正面的文字；忽略從紙張背面透出來的文字。
2. 無法辨識的段落寫作【模糊】，絕不猜測或補寫。
3. 條文編號與層級（例如「第十條」、「第一項」、「第二款」、（一）、1.）必須原樣保留，不得重新編號。
4. 「得」與「應」決定「可以」與「必須」，必須與原文完全一致，絕不互換或省略；「不得」、「須」亦同。
5. 表格以 Markdown 表格輸出；合併儲存格等複雜表格改用 HTML <table>。
6. 流程圖依箭頭順序逐框轉錄，每框一行，以「→」連接。
7. 註腳編號標為 [^n]，註腳內容放在頁末。
8. 不要翻譯、摘要或評論；只輸出轉錄內容。"""

MARKDOWN = """\
Transcribe this document page to Markdown exactly as written, in its original language.
Keep the reading order of columns, headings as Markdown headings, lists as lists, and tables as
Markdown tables (HTML <table> when cells are merged). Write formulas in LaTeX. Do not translate,
summarize or describe images; output only the page's text."""

PLAIN = """\
Transcribe all text on this page exactly as written, in reading order, as plain text.
Do not translate, summarize or add anything."""

# Qwen-VL's own document-parsing mode: HTML whose elements carry `data-bbox` (Qwen3-VL: on a
# 0-1000 grid of the page; Qwen2.5-VL: in pixels of the image its processor saw), so the page
# comes back as blocks with boxes. The prompt is the one Qwen's cookbook uses.
QWENVL_HTML = "qwenvl html"

PRESETS: dict[str, Prompt] = {
    p.name: p
    for p in (
        Prompt("legal-zh-tw", "1", LEGAL_ZH_TW),
        Prompt("markdown", "1", MARKDOWN),
        Prompt("plain", "1", PLAIN),
        Prompt("qwenvl-html", "1", QWENVL_HTML, answer="qwenvl-html"),
    )
}


EXTRACT_JSON = Prompt(
    name="extract-json",
    version="1",
    text=(
        "Read this page and answer with one JSON object that follows the JSON Schema below. "
        "Take every value from the page as printed (numbers and dates exactly as they appear); "
        "where the page does not give a value, use null if the schema allows it."
    ),
)


def resolve(
    preset: str | None, custom: str | None, default: str, schema: dict[str, Any] | None = None
) -> Prompt:
    if schema is not None:
        return (Prompt.custom(custom) if custom is not None else EXTRACT_JSON).for_schema(schema)
    if custom is not None:
        return Prompt.custom(custom)
    return PRESETS[preset or default]
