"""Real PDFs made with PyMuPDF, for the demo input, the warm-up page, benchmarks and tests.

CJK paragraphs are set in MuPDF's built-in Traditional Chinese font and Latin ones in Helvetica,
so a rendered page looks like a real document and the expected text is known exactly.
"""

from __future__ import annotations

import re

import pymupdf

A4 = (595, 842)
MARGIN = 56
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")

LEGAL_PAGES = [
    [
        "租賃契約書",
        "第一條 本契約租賃標的為臺北市中正區重慶南路一段一號三樓。",
        "第二條 租賃期間自民國一百十五年一月一日起至一百十六年十二月三十一日止。",
        "第三條 承租人應於每月五日前支付租金新臺幣三萬元整。",
        "Article 3. The tenant shall pay a monthly rent of NT$30,000 "
        "by the fifth day of each month.",
    ],
    [
        "第四條 承租人不得將租賃物轉租他人。",
        "第五條 出租人得於租期屆滿前三個月以書面通知終止本契約。",
        "Article 5. The landlord may terminate this contract by written notice "
        "three months before the term ends.",
        "第六條 本契約未盡事宜，依民法及相關法令辦理。",
    ],
]


def _font(text: str) -> tuple[str, float]:
    return ("china-t", 13.0) if _CJK.search(text) else ("helv", 11.5)


def write_column(page: pymupdf.Page, rect: pymupdf.Rect, paragraphs: list[str]) -> None:
    """Set paragraphs top to bottom in `rect`, each in the font its script needs."""
    y = rect.y0
    for para in paragraphs:
        fontname, size = _font(para)
        box = pymupdf.Rect(rect.x0, y, rect.x1, rect.y1)
        left = page.insert_textbox(box, para, fontname=fontname, fontsize=size)
        if left < 0:
            raise ValueError(f"paragraph does not fit on the page: {para[:40]!r}")
        used = box.height - left
        y += used + size * 0.9


def pdf_from_pages(pages: list[list[str]], *, columns: int = 1) -> bytes:
    """A PDF with one A4 page per entry; `columns` > 1 splits each page's paragraphs evenly."""
    doc = pymupdf.open()
    width, height = A4
    gutter = 36
    col_w = (width - 2 * MARGIN - gutter * (columns - 1)) / columns
    for paragraphs in pages:
        page = doc.new_page(width=width, height=height)
        per_col = -(-len(paragraphs) // columns)
        for c in range(columns):
            x0 = MARGIN + c * (col_w + gutter)
            rect = pymupdf.Rect(x0, MARGIN, x0 + col_w, height - MARGIN)
            write_column(page, rect, paragraphs[c * per_col : (c + 1) * per_col])
    data = doc.tobytes(garbage=3, deflate=True)
    doc.close()
    return data


def numbered_pages(count: int, *, lines: int = 6, first: int = 1) -> list[list[str]]:
    """Pages whose text differs page by page, so a mix-up between pages shows; `first` numbers
    another set of pages of the same shape."""
    out = []
    for n in range(first, first + count):
        body = [f"Page {n} of {count}. Reference number {n * 7919 % 100000:05d}."]
        body += [
            f"Clause {n}.{i}: the party numbered {n * 31 + i} shall deliver item {i * 13 + n}."
            for i in range(1, lines)
        ]
        body.append(f"第{n}頁 當事人應於第{n}條所定期限內履行義務。")
        out.append(body)
    return out


def scanned(pdf: bytes, dpi: int = 150) -> bytes:
    """The PDF as a scanner would make it: each page a JPEG, no text layer."""
    out = pymupdf.open()
    with pymupdf.open(stream=pdf) as doc:
        for page in doc:
            pix = page.get_pixmap(dpi=dpi)
            new = out.new_page(width=page.rect.width, height=page.rect.height)
            new.insert_image(new.rect, stream=pix.tobytes("jpeg", jpg_quality=80))
    return out.tobytes(garbage=3, deflate=True)


def page_text(paragraphs: list[str]) -> str:
    return "\n".join(paragraphs)


def demo_job() -> dict:
    """The job in `test_input.json`: the two-page lease, base64, with the legal preset."""
    import base64

    pdf = base64.b64encode(pdf_from_pages(LEGAL_PAGES)).decode()
    return {
        "input": {
            "pdf": {"base64": pdf, "name": "lease-zh-tw.pdf"},
            "prompt": "legal-zh-tw",
            "output_prefix": "demo/lease",
            "return_text": True,
        }
    }


if __name__ == "__main__":
    import json

    print(json.dumps(demo_job(), ensure_ascii=False, indent=2))
