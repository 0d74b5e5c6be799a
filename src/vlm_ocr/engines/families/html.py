"""The HTML that layout models answer with, read without trusting it.

`parse` builds a small tree with the standard library's parser: unclosed tags are closed at the
end (an answer cut off at its token cap keeps what it has), stray end tags are ignored, and the
depth is bounded. `boxed` finds the outermost elements that carry a `data-bbox`; `markdown`
turns an element's content into Markdown the way the page reads: headings, paragraphs, lists,
emphasis, math as `$…$`; tables stay HTML.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = frozenset(
    {"br", "img", "hr", "meta", "input", "col", "area", "base", "link", "source", "wbr"}
)
MAX_DEPTH = 200
_SPACE = re.compile(r"[ \t\r\n\f]+")


@dataclass
class Node:
    tag: str
    attrs: dict[str, str] = field(default_factory=dict)
    children: list[Node | str] = field(default_factory=list)

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root")
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID and len(self.stack) < MAX_DEPTH:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(text: str) -> Node:
    builder = _Builder()
    builder.feed(text)
    builder.close()
    return builder.root


def boxed(root: Node) -> list[Node]:
    """The outermost elements with a `data-bbox`, in document order."""
    found: list[Node] = []

    def walk(node: Node) -> None:
        for child in node.children:
            if isinstance(child, Node):
                if "data-bbox" in child.attrs:
                    found.append(child)
                else:
                    walk(child)

    walk(root)
    return found


def box_of(node: Node) -> tuple[float, ...] | None:
    """The numbers of `data-bbox="x0 y0 x1 y1"` (commas and brackets allowed), or None."""
    numbers = re.findall(r"-?\d+(?:\.\d+)?", node.attrs.get("data-bbox", ""))
    return tuple(float(n) for n in numbers) if len(numbers) == 4 else None


def outer_html(node: Node) -> str:
    attrs = "".join(
        f' {k}="{html.escape(v, quote=True)}"' for k, v in node.attrs.items() if k != "data-bbox"
    )
    if node.tag in VOID:
        return f"<{node.tag}{attrs}>"
    inner = "".join(
        html.escape(c, quote=False) if isinstance(c, str) else outer_html(c) for c in node.children
    )
    return f"<{node.tag}{attrs}>{inner}</{node.tag}>"


def find(node: Node, tag: str) -> Node | None:
    for child in node.children:
        if isinstance(child, Node):
            if child.tag == tag:
                return child
            inner = find(child, tag)
            if inner is not None:
                return inner
    return None


# --- to Markdown ------------------------------------------------------------------------------


def markdown(node: Node) -> str:
    """The element's content as Markdown."""
    out = _blocks(node, 0)
    return re.sub(r"\n{3,}", "\n\n", out).strip()


def _inline(node: Node | str) -> str:
    if isinstance(node, str):
        return _SPACE.sub(" ", node)
    tag = node.tag
    if tag == "br":
        return "\n"
    if tag == "img":
        alt = node.attrs.get("alt", "").strip()
        src = node.attrs.get("src", "")
        return f"![{alt}]({src})" if src else (f"[{alt}]" if alt else "")
    if tag == "input" and node.attrs.get("type") == "checkbox":
        return "[x] " if "checked" in node.attrs else "[ ] "
    if tag == "table":
        return outer_html(node)
    inner = "".join(_inline(c) for c in node.children)
    if tag == "math":
        latex = node.text().strip()
        return f"\n$$\n{latex}\n$$\n" if node.attrs.get("display") == "block" else f"${latex}$"
    if tag in ("b", "strong") and inner.strip():
        return f"**{inner.strip()}**"
    if tag in ("i", "em") and inner.strip():
        return f"*{inner.strip()}*"
    if tag in ("sub", "sup"):
        return f"<{tag}>{inner}</{tag}>"
    if tag == "code":
        return f"`{inner}`"
    return inner


BLOCK_TAGS = frozenset(
    {
        "p",
        "div",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "ul",
        "ol",
        "li",
        "table",
        "pre",
        "blockquote",
        "section",
        "header",
        "footer",
        "figure",
        "figcaption",
        "body",
        "html",
    }
)


def _blocks(node: Node, depth: int) -> str:
    parts: list[str] = []
    line: list[str] = []

    def flush() -> None:
        text = re.sub(r" {2,}", " ", "".join(line)).replace(" \n", "\n").strip()
        if text:
            parts.append(text)
        line.clear()

    for child in node.children:
        if isinstance(child, str) or child.tag not in BLOCK_TAGS:
            line.append(_inline(child))
            continue
        flush()
        tag = child.tag
        if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            parts.append(
                "#" * int(tag[1]) + " " + "".join(_inline(c) for c in child.children).strip()
            )
        elif tag in ("ul", "ol"):
            parts.append(_list(child, depth))
        elif tag == "table":
            parts.append(outer_html(child))
        elif tag == "pre":
            parts.append("```\n" + child.text().strip("\n") + "\n```")
        else:
            parts.append(_blocks(child, depth))
    flush()
    return "\n\n".join(p for p in parts if p)


def _list(node: Node, depth: int) -> str:
    items = []
    number = 0
    for child in node.children:
        if not isinstance(child, Node) or child.tag != "li":
            continue
        number += 1
        mark = f"{number}." if node.tag == "ol" else "-"
        nested = [c for c in child.children if isinstance(c, Node) and c.tag in ("ul", "ol")]
        own = Node("li", children=[c for c in child.children if c not in nested])
        text = _blocks(own, depth + 1).replace("\n\n", " ")
        items.append("  " * depth + f"{mark} {text}".rstrip())
        items += [_list(n, depth + 1) for n in nested]
    return "\n".join(items)
