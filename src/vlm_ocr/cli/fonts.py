"""A font with Chinese, Japanese and Korean in it, for the text `vlm-ocr show` draws and the
review page's font stack: PIL's own font and a browser's Latin fonts have none, and draw such
text as empty boxes. PIL's own font has ASCII and little more, so `show` draws the rest of Latin,
Greek and Cyrillic in the sans-serif font MuPDF ships (`latin_font`), which has them.

Found on the system, never shipped: fontconfig's choice for Traditional Chinese (`fc-match
:lang=zh-tw`, where fontconfig is installed), else the usual places of the common CJK fonts. A
font is taken only if it draws 中 as a glyph of its own, not as its empty box."""

from __future__ import annotations

import functools
import io
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pymupdf
from PIL import ImageFont

# Where the common CJK fonts are installed: Debian and Ubuntu (fonts-noto-cjk, fonts-wqy-*,
# fonts-arphic-*), Fedora, macOS and Windows.
COMMON_PATHS = (
    "/usr/share/fonts/opentype/noto/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/noto-cjk/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/google-noto-cjk/NotoSansCJK-Regular.ttc",
    "/usr/share/fonts/truetype/wqy/wqy-microhei.ttc",
    "/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc",
    "/usr/share/fonts/wqy-microhei/wqy-microhei.ttc",
    "/usr/share/fonts/truetype/arphic/uming.ttc",
    "/System/Library/Fonts/PingFang.ttc",
    "/System/Library/Fonts/STHeiti Medium.ttc",
    "C:/Windows/Fonts/msjh.ttc",
    "C:/Windows/Fonts/msyh.ttc",
)
# The CJK families a browser may have, Traditional Chinese first (the review page's stack names
# these after the one found here, so a page opened on another machine finds its own).
CSS_FAMILIES = (
    "Noto Sans CJK TC",
    "Noto Sans TC",
    "Source Han Sans TC",
    "PingFang TC",
    "Microsoft JhengHei",
    "WenQuanYi Micro Hei",
    "Noto Sans CJK SC",
    "PingFang SC",
    "Microsoft YaHei",
    "Hiragino Sans",
    "Noto Sans CJK JP",
    "Noto Sans CJK KR",
)
INSTALL = (
    "install one (Debian and Ubuntu: apt-get install fonts-noto-cjk, or the smaller "
    "fonts-wqy-microhei)"
)
FC_TIMEOUT_S = 30.0  # fontconfig's first run on a machine builds its cache


@dataclass(frozen=True)
class Found:
    path: Path
    index: int  # the face in a font collection (.ttc)
    family: str | None

    def font(self, size: int) -> ImageFont.FreeTypeFont:
        return _truetype(str(self.path), self.index, size)


@functools.cache  # `show` measures its text run by run
def _truetype(path: str, index: int, size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(path, size, index=index)


@functools.cache
def cjk_font() -> Found | None:
    """The system's CJK font, looked for once per process; None when it has none."""
    for found in (*_fontconfig(), *_common()):
        if _draws_cjk(found):
            return found
    return None


def _fontconfig() -> list[Found]:
    fc = shutil.which("fc-match")
    if fc is None:
        return []
    try:
        out = subprocess.run(
            [fc, "--format", "%{file}\t%{index}\t%{family[0]}", ":lang=zh-tw"],
            capture_output=True,
            text=True,
            timeout=FC_TIMEOUT_S,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    path, index, family = [*out.split("\t"), "", "", ""][:3]
    if not path:
        return []
    return [Found(Path(path), int(index) if index.isdigit() else 0, family or None)]


def _common() -> list[Found]:
    return [Found(Path(p), 0, None) for p in COMMON_PATHS if Path(p).is_file()]


def _draws_cjk(found: Found) -> bool:
    """The font draws 中 with ink, and not as the box it draws for a character it lacks."""
    try:
        font = found.font(32)
        han = font.getmask("中")
        missing = font.getmask("\U0010fffd")  # a private character no font has
    except (OSError, ValueError):
        return False
    return han.getbbox() is not None and bytes(han) != bytes(missing)


@functools.cache
def _mupdf_sans() -> pymupdf.Font:
    return pymupdf.Font("helv")  # built into MuPDF: Latin, Greek and Cyrillic


@functools.cache
def latin_font(size: int) -> ImageFont.FreeTypeFont:
    """MuPDF's own sans-serif font, for the non-ASCII letters PIL's own font lacks."""
    return ImageFont.truetype(io.BytesIO(_mupdf_sans().buffer), size)


def script(char: str) -> str:
    """Which font draws `char`: "ascii" (PIL's own, which has no more), "latin" (`latin_font`:
    accented Latin, Greek, Cyrillic, the signs beside them) or "cjk" (the system's, for the
    rest)."""
    if ord(char) < 0x80:
        return "ascii"
    return "latin" if _mupdf_sans().has_glyph(ord(char)) else "cjk"


def css_stack() -> str:
    """The CJK part of a CSS font stack: the family found here, then the common ones."""
    found = cjk_font()
    own = [found.family] if found is not None and found.family else []
    names = dict.fromkeys([*own, *CSS_FAMILIES])
    return ", ".join(f'"{name}"' for name in names)
