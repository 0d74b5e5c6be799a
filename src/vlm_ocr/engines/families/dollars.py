"""Escaped dollar signs, repaired as LightOn repairs its models' answers (its client and its
benchmarks do it to every LightOnOCR answer, both modes): the models often write inline math as
`\\$x\\$`, which Markdown shows as two literal dollar signs. Only a pair of delimiters around a
body that reads as math is unescaped; everything else is left as written, so a price stays a
price (`\\$5 per \\$x\\$` becomes `\\$5 per $x$`).

What is never touched: code (fenced, inline), HTML comments, the insides of `<pre>`, `<code>`,
`<script>` and `<style>`, every HTML tag, URLs and link destinations, and math already delimited
(`$$…$$`, `\\[…\\]`, `\\(…\\)`). A pair is two dollar signs in a row on one line, at least one
of them escaped, around a body that is math: commands, numbers, single letters, operators and a
few function names, its brackets balanced. A pair is left alone when a currency code is glued to
its first sign (`US\\$`), when its body is a number and only its first sign is escaped, when a
number follows its second sign (`\\$5-\\$10`), or when another sign touches it (unescaped, the
two would read as `$$`, display math).

Every pattern here is bounded or ends at the next match of itself, so no answer, however
hostile, costs more than a pass or two over its text.
"""

from __future__ import annotations

import re

_PROTECTED = re.compile(
    r"```[\s\S]*?(?:```|\Z)"  # fenced code (a fence cut off runs to the end)
    r"|`[^`\n]*`"  # inline code
    r"|<!--[\s\S]{0,4000}?-->"
    r"|<(pre|code|script|style)\b[\s\S]{0,20000}?</\1\s*>"
    r"|<[A-Za-z/!][^<>\n]{0,2000}>"  # any other tag, with its attributes
    r"|https?://[^\s<>()\]]+"
    r"|\]\([^()\s]{0,2000}\)"  # a link's destination
    r"|^\[[^\]\n]{1,200}\]:[^\n]*$"  # a link reference definition
    r"|\$\$[\s\S]*?\$\$"
    r"|\\\[[\s\S]{0,4000}?\\\]"
    r"|\\\([\s\S]{0,4000}?\\\)",
    re.M,
)
_DOLLAR = re.compile(r"\\?\$")
_CURRENCY_BEFORE = re.compile(r"(?:^|[^A-Za-z])[A-Z]{1,3}$")
_NUMBER_CHARS = frozenset("0123456789.,-+ \t")
_WORD = re.compile(r"\\?[A-Za-z]+")
# names written upright in math that a body may hold beside single letters
MATH_NAMES = frozenset(
    {"sin", "cos", "tan", "cot", "sec", "csc", "log", "ln", "lg", "exp", "max", "min", "sup"}
    | {"inf", "lim", "det", "dim", "arg", "mod", "gcd", "deg"}
)
PAIRS = (("{", "}"), ("(", ")"), ("[", "]"))


def fix_escaped_dollars(text: str) -> str:
    """`text` with each escaped pair of math delimiters unescaped (see the module)."""
    if "\\$" not in text:
        return text
    out, start = [], 0
    for match in _PROTECTED.finditer(text):
        out.append(_repair(text[start : match.start()]))
        out.append(match.group())
        start = match.end()
    out.append(_repair(text[start:]))
    return "".join(out)


def _repair(segment: str) -> str:
    """One stretch of text between protected parts, its pairs repaired."""
    tokens = list(_DOLLAR.finditer(segment))
    unescape: list[re.Match[str]] = []
    i = 0
    while i + 1 < len(tokens):
        first, second = tokens[i], tokens[i + 1]
        body = segment[first.end() : second.start()]
        escaped = first.group() != "$" or second.group() != "$"
        if not escaped and is_math(body):
            i += 2  # a pair already right: its signs pair with no other
        elif escaped and _acceptable(segment, first, second, body):
            unescape += [first, second]
            i += 2
        else:
            i += 1
    if not unescape:
        return segment
    out, start = [], 0
    for token in unescape:
        out += [segment[start : token.start()], "$"]
        start = token.end()
    out.append(segment[start:])
    return "".join(out)


def _acceptable(segment: str, first: re.Match[str], second: re.Match[str], body: str) -> bool:
    if "\n" in body or not is_math(body):
        return False
    if _CURRENCY_BEFORE.search(segment[max(0, first.start() - 4) : first.start()]):
        return False  # US\$, HK\$: money
    after = segment[second.end() : second.end() + 2]
    if after.startswith(("$", "\\$")) or segment[max(0, first.start() - 1) : first.start()] == "$":
        return False  # unescaped, it would touch another sign: `$$`, display math
    after = after[:1]
    numeric = any(ch.isdigit() for ch in body) and all(ch in _NUMBER_CHARS for ch in body)
    if numeric and first.group() != "$" and second.group() == "$":
        return False  # \$5 ... $: a price, then something else
    return not (after.isdigit() or (numeric and after in (".", ",")))


def is_math(body: str) -> bool:
    """Whether a body between two dollar signs reads as inline math."""
    text = body.strip()
    if not text or text != body:
        return False
    for opening, closing in PAIRS:
        depth = 0
        for ch in text:
            depth += (ch == opening) - (ch == closing)
            if depth < 0:
                return False
        if depth:
            return False
    for word in _WORD.finditer(text):
        name = word.group()
        if not name.startswith("\\") and len(name) > 1 and name.lower() not in MATH_NAMES:
            return False
    return True
