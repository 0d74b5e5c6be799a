"""`python -m vlm_ocr_lab.bench.furniture`: how well the CPU engine leaves page furniture out.

It builds real PDFs with PyMuPDF: in English and in Chinese, eight kinds of document of three
pages each, every page full of text and set with its kind's furniture (a journal's running head
and page number, a download stamp, a web address, a report's header and copyright line, a book's
chapter head, a printed web page, a conference paper in two columns; the eighth has none), so
every furniture line of every page is known. The CPU engine reads each document's middle page
alone (the single page, where no other page tells a running head) and then each document as one
job, with the layout model and without it (CPU_LAYOUT=false). Each run prints the furniture
lines, how many were left out of the text (recall), the blocks taken for furniture and how many
of them were furniture (precision), and who took them: the layout model, the margin rule, the
document's repeated lines. `--details` lists what was missed and what was taken wrongly.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymupdf
from rapidfuzz import fuzz

from vlm_ocr.blocks import RUNNING
from vlm_ocr.pipeline.textsim import clean
from vlm_ocr.pipeline.worker import build_worker
from vlm_ocr.settings import Settings

A4 = (595.0, 842.0)
MARGIN = 64.0
MATCH = 85  # rapidfuzz partial ratio: a block and a furniture line are the same text

EN_BODY = [
    "Rivers have shaped the growth of cities for as long as there have been cities. A river "
    "brings water to drink and to irrigate fields, carries goods and people, and carries away "
    "what the city no longer needs. The same river also floods the streets in spring.",
    "The measurements reported here were taken at eleven gauging stations along the lower "
    "course of the river between 2015 and 2020. Each station recorded the water level every "
    "fifteen minutes and the discharge once a day, from a calibrated rating curve.",
    "Sediment samples were collected in the dry season, dried at 105 degrees for a day and "
    "sieved. The fine fraction was weighed on a balance with a resolution of one milligram, "
    "and each sample was weighed three times by two different people.",
    "Discharge rose with the rainfall of the preceding week, not of the same day: the delay "
    "between a storm upstream and the peak at the city was between four and nine days, longer "
    "in years when the wetlands above the city held more water.",
    "Older embankments built of earth held the floods of ordinary years but failed in the "
    "largest ones, when water stood against them for more than a week. Concrete walls built "
    "since then hold longer, but send the water faster to the towns downstream.",
    "The city now lets the river spread over parks and playing fields in its floods. These "
    "areas are dry for most of the year and are used as the people living nearby wish; when "
    "the water comes, they hold it for some days and give it back slowly.",
    "We thank the staff of the gauging stations for their records, and the students who "
    "carried the sediment samples. The data and the code of the analysis are available from "
    "the authors on request, and will be deposited with the journal.",
    "In summary, the river reaches the city later and higher than it did fifty years ago. "
    "Room for the water upstream lowers the peak more than higher walls in the city do, and "
    "costs less to keep over the years for which such works are built.",
]
ZH_BODY = [
    "河流是城市发展的重要依托。自古以来，人们沿河而居，依水而建，河流为城市提供了饮用水源、"
    "灌溉用水和便利的交通运输条件，同时也带走城市产生的污水和垃圾。",
    "本文的观测数据来自下游河段的十一个水文站，观测时段为二〇一五年至二〇二〇年。各站每十五分钟"
    "记录一次水位，每天根据率定的水位流量关系推算一次流量。",
    "泥沙样品均在枯水期采集，在一百零五摄氏度下烘干一昼夜后过筛。细颗粒部分用感量为一毫克的天平"
    "称重，每个样品由两人分别称量三次，取其平均值。",
    "流量的变化与前一周的降雨关系密切，而与当天的降雨关系不大。上游降雨到城区出现洪峰的时间间隔为"
    "四至九天，上游湿地蓄水较多的年份间隔更长。",
    "早年修建的土堤能够抵御一般年份的洪水，但在特大洪水中，当洪水持续浸泡一周以上时往往发生溃决。"
    "此后修建的混凝土防洪墙更加坚固，却使洪水更快地涌向下游城镇。",
    "如今，城市在洪水期间允许河水漫入公园和运动场。这些场地一年中大部分时间是干的，供附近居民"
    "自由使用；洪水来临时，它们可以滞蓄洪水数日，再缓慢地将其排出。",
    "感谢各水文站工作人员提供观测记录，感谢参与泥沙采样的同学们。本文的数据和分析代码可向作者索取，"
    "并将提交编辑部存档，供读者查阅和核对。",
    "综上所述，与五十年前相比，洪水到达城区的时间更晚，洪峰更高。在上游为洪水留出空间，比在城区"
    "加高防洪墙更能降低洪峰，而且在工程的使用年限内维护费用更低。",
]
EN_TITLES = ["Introduction", "Methods", "Results", "Discussion"]
ZH_TITLES = ["引言", "材料与方法", "结果", "讨论"]


@dataclass(frozen=True)
class Mark:
    """One furniture line: its text and where it is set (top or bottom; left, centre, right)."""

    text: str
    edge: str  # "top" or "bottom"
    side: str = "centre"  # "left", "centre", "right"


def furniture(script: str, style: int, page: int) -> list[Mark]:
    """The furniture of page `page` of the `style`-th kind of document (the last: none)."""
    return (_english if script == "en" else _chinese)(page)[style]


def _english(page: int) -> list[list[Mark]]:
    return [
        [
            Mark(str(page), "top", "left"),
            Mark("J. Appl. Hydrol. 12 (2021) 45–67", "top", "right"),
        ],
        [
            Mark("Journal of Applied Hydrology, Vol. 12, No. 3, 2021", "top"),
            Mark(str(page), "bottom"),
        ],
        [
            Mark(f"Page {page} of 24", "top", "right"),
            Mark(
                "Downloaded from https://journals.example.org/jah/article/12/3/45 by guest "
                "on 12 May 2024",
                "bottom",
            ),
        ],
        [
            Mark("Annual Report 2025", "top", "left"),
            Mark("Section 2 · Results", "top", "right"),
            Mark("© 2025 Example Water Board. All rights reserved.", "bottom", "left"),
            Mark(f"- {page} -", "bottom", "right"),
        ],
        [Mark("CHAPTER 3 · THE RIVER AND THE CITY", "top"), Mark(str(page), "bottom")],
        [
            Mark("12/05/2024, 10:31", "top", "left"),
            Mark("Rivers of Europe - Example Encyclopedia", "top", "right"),
            Mark("https://encyclopedia.example.org/wiki/Rivers_of_Europe", "bottom", "left"),
            Mark(f"{page}/9", "bottom", "right"),
        ],
        [
            Mark(
                "Proceedings of the Example Conference on Water (ECW 2023), pp. 112–119",
                "top",
                "left",
            ),
            Mark(str(page), "top", "right"),
            Mark("DOI: 10.1234/ecw.2023.112", "bottom", "left"),
        ],
        [],
    ]


def _chinese(page: int) -> list[list[Mark]]:
    return [
        [Mark("水利科学学报  2021年 第12卷 第3期", "top"), Mark(f"· {page} ·", "bottom")],
        [
            Mark(f"第 {page} 页", "top", "left"),
            Mark("中国示例水文学报", "top", "right"),
            Mark("http://www.example-journal.cn", "bottom"),
        ],
        [
            Mark(str(page), "top", "right"),
            Mark("下载自 https://kns.example.cn 2024-05-12 10:31", "bottom"),
        ],
        [Mark("第三章  河流与城市", "top"), Mark(f"— {page} —", "bottom")],
        [
            Mark("示例水务集团 2025年度报告", "top", "left"),
            Mark(str(page), "top", "right"),
            Mark("版权所有 © 2025 示例水务集团", "bottom"),
        ],
        [
            Mark("2024年5月12日 星期日", "top", "left"),
            Mark("示例日报", "top", "right"),
            Mark(f"第{page}版", "bottom"),
        ],
        [Mark("CN 11-1234/P  ISSN 1000-1234", "top", "left"), Mark(str(page), "bottom")],
        [],
    ]


STYLES = 8  # kinds of document in each script, the last without furniture


@dataclass(frozen=True)
class BuiltPage:
    script: str
    style: int
    number: int  # the page number its furniture prints
    marks: list[Mark]


def _font(script: str) -> str:
    return "helv" if script == "en" else "china-s"


def draw(doc: pymupdf.Document, page_spec: BuiltPage) -> None:
    """One page full of text (two columns for the conference paper): a section title, then
    paragraphs down to the bottom margin; and its furniture."""
    script, style = page_spec.script, page_spec.style
    width, height = A4
    page = doc.new_page(width=width, height=height)
    body = EN_BODY if script == "en" else ZH_BODY
    titles = EN_TITLES if script == "en" else ZH_TITLES
    font, size = _font(script), 10.5 if script == "en" else 10.0
    columns = 2 if style == 6 else 1
    gutter = 24.0
    col_w = (width - 2 * MARGIN - gutter * (columns - 1)) / columns
    n = style + page_spec.number  # pages start with a title and a paragraph of their own
    for c in range(columns):
        x0 = MARGIN + c * (col_w + gutter)
        y = MARGIN + 28
        if c == 0:
            title = f"{page_spec.number - 39}. {titles[page_spec.number % len(titles)]}"
            page.insert_text((x0, y), title, fontname=font, fontsize=13)
            y += 16
        bottom = height - MARGIN - 12
        while y < bottom - 2 * size:  # paragraphs until the next one does not fit
            rect = pymupdf.Rect(x0, y, x0 + col_w, bottom)
            left = page.insert_textbox(
                rect, body[n % len(body)], fontname=font, fontsize=size, lineheight=1.35
            )
            if left < 0:
                break
            n += 1
            y += rect.height - left + size
    for mark in page_spec.marks:
        _mark(page, mark, font)


def _mark(page: pymupdf.Page, mark: Mark, font: str) -> None:
    size = 8.0
    width, height = A4
    text_w = pymupdf.get_text_length(mark.text, fontname=font, fontsize=size)
    x = {"left": MARGIN, "right": width - MARGIN - text_w}.get(mark.side, (width - text_w) / 2)
    y = 40.0 if mark.edge == "top" else height - 32.0
    page.insert_text((x, y), mark.text, fontname=font, fontsize=size)


def documents(script: str, pages: int = 3) -> list[list[BuiltPage]]:
    """A document of `pages` pages for each kind of furniture in one script, numbered on from
    page 40 (the page number each page prints)."""
    docs = []
    for style in range(STYLES):
        first = 40 + pages * style
        docs.append(
            [
                BuiltPage(script, style, n, furniture(script, style, n))
                for n in range(first, first + pages)
            ]
        )
    return docs


def pdf(pages: list[BuiltPage]) -> bytes:
    doc = pymupdf.open()
    for spec in pages:
        draw(doc, spec)
    data = doc.tobytes(garbage=3, deflate=True)
    doc.close()
    return data


# --- scoring ------------------------------------------------------------------------------------


@dataclass
class Tally:
    marks: int = 0  # furniture lines set on the pages
    left_out: int = 0  # of them, not in the page text
    taken: int = 0  # blocks labelled header, footer or page number
    right: int = 0  # of them, furniture
    by: dict[str, int] | None = None  # blocks taken, by who took them
    missed: list[str] = field(default_factory=list)  # furniture left in the text
    wrong: list[str] = field(default_factory=list)  # blocks taken that are not furniture

    def add(self, other: Tally) -> None:
        self.marks += other.marks
        self.left_out += other.left_out
        self.taken += other.taken
        self.right += other.right
        self.missed += other.missed
        self.wrong += other.wrong
        for k, v in (other.by or {}).items():
            self.by = self.by or {}
            self.by[k] = self.by.get(k, 0) + v


def _finder(block: dict[str, Any]) -> str:
    label = block.get("label") or ""
    if label.startswith("margin-"):
        return "margin rule"
    if label in {"header", "footer", "header-page-number", "footer-page-number"}:
        return "layout model"
    return "repeated lines"


def _within(short: str, long: str) -> bool:
    """`short` is in `long`, but for a misread character or two."""
    return bool(short) and len(short) <= len(long) and fuzz.partial_ratio(short, long) >= MATCH


def score_page(spec: BuiltPage, blocks: list[dict[str, Any]]) -> Tally:
    """What the page's blocks took for furniture, against its known furniture. A mark is left
    out of the text when the blocks taken for furniture hold it (taken blocks are what
    `headers_footers: drop` leaves out; a mark may be read as two); a taken block is furniture
    when it is part of a mark or marks make up most of it."""
    marks = [clean(m.text) for m in spec.marks]
    taken = [b for b in blocks if b["kind"] in RUNNING]
    held = [clean(b["content"]) for b in taken]
    together = "".join(held)
    missed = [
        mark.text for mark, m in zip(spec.marks, marks, strict=True) if not _within(m, together)
    ]
    wrong = []
    for block, h in zip(taken, held, strict=True):
        covered = sum(len(m) for m in marks if _within(m, h))
        if not (h and (covered >= 0.8 * len(h) or any(_within(h, m) for m in marks))):
            wrong.append(block["content"])
    by: dict[str, int] = {}
    for block in taken:
        by[_finder(block)] = by.get(_finder(block), 0) + 1
    return Tally(
        len(marks), len(marks) - len(missed), len(taken), len(taken) - len(wrong), by, missed, wrong
    )


# --- running ------------------------------------------------------------------------------------


async def run(settings: Settings, layout: bool) -> dict[str, Tally]:
    """Tallies by run ("English, each page alone", …) with the layout model on or off."""
    from vlm_ocr.engines.factory import make_engine

    settings = settings.with_(engine="rapidocr", cpu_layout=layout, auto_rotate=False)
    tallies: dict[str, Tally] = {}
    with tempfile.TemporaryDirectory(prefix="vlm-ocr-furniture-") as tmp:
        out = Path(tmp)
        worker = build_worker(settings, make_engine(settings), out_dir=out)
        await worker.start()
        try:
            for script, name in (("en", "English"), ("zh", "Chinese")):
                docs = documents(script)
                alone, whole = Tally(), Tally()
                for n, doc in enumerate(docs):
                    [one] = await _job(worker, out, doc[1:2], f"{script}-{n}-alone")
                    alone.add(one)
                    for tally in await _job(worker, out, doc, f"{script}-{n}-document"):
                        whole.add(tally)
                tallies[f"{name}, each page alone"] = alone
                tallies[f"{name}, 3-page documents"] = whole
        finally:
            await worker.close()
    return tallies


async def _job(worker: Any, out: Path, pages: list[BuiltPage], prefix: str) -> list[Tally]:
    job = {"pdf": {"base64": base64.b64encode(pdf(pages)).decode()}, "output_prefix": prefix}
    result = await worker.run(prefix, job)
    tallies = []
    for spec, report in zip(pages, result.pages, strict=True):
        if report.status != "ok" or not report.blocks_key:
            print(
                f"{prefix} page {report.page}: {report.status} {report.error or ''}",
                file=sys.stderr,
            )
            tallies.append(Tally(len(spec.marks)))
            continue
        blocks = json.loads((out / report.blocks_key).read_text())["blocks"]
        tallies.append(score_page(spec, blocks))
    return tallies


def print_tallies(title: str, tallies: dict[str, Tally], details: bool = False) -> None:
    print(title)
    print(
        f"{'run':<28}{'furniture':>10}{'left out':>10}{'recall':>8}{'taken':>7}"
        f"{'right':>7}{'precision':>10}  taken by"
    )
    for name, t in tallies.items():
        recall = t.left_out / t.marks if t.marks else 0.0
        precision = f"{t.right / t.taken:.2f}" if t.taken else "-"
        by = ", ".join(f"{k} {v}" for k, v in sorted((t.by or {}).items()))
        print(
            f"{name:<28}{t.marks:>10}{t.left_out:>10}{recall:>8.2f}{t.taken:>7}{t.right:>7}"
            f"{precision:>10}  {by or '-'}"
        )
        if details:
            for text in t.missed:
                print(f"    left in the text: {text!r}")
            for text in t.wrong:
                print(f"    taken, not furniture: {text!r}")


async def main(argv: list[str] | None = None) -> int:
    import os

    parser = argparse.ArgumentParser(prog="python -m vlm_ocr_lab.bench.furniture")
    parser.add_argument("--pdf", type=Path, help="also write the documents built to this folder")
    parser.add_argument(
        "--details", action="store_true", help="list the lines left in and the blocks taken wrongly"
    )
    args = parser.parse_args(argv)
    if args.pdf:
        args.pdf.mkdir(parents=True, exist_ok=True)
        for script in ("en", "zh"):
            for n, doc in enumerate(documents(script)):
                (args.pdf / f"furniture-{script}-{n}.pdf").write_bytes(pdf(doc))
    settings = Settings.from_env(os.environ)
    for layout in (False, True):
        tallies = await run(settings, layout)
        name = "with the layout model" if layout else "without it (CPU_LAYOUT=false)"
        print_tallies(f"CPU engine {name}:", tallies, args.details)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
