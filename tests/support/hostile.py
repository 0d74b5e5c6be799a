"""Hostile inputs, generated: small files that ask for a lot of work or memory."""

from __future__ import annotations


def _pdf(objs: dict[int, bytes]) -> bytes:
    out = bytearray(b"%PDF-1.4\n")
    offsets: dict[int, int] = {}
    for n in sorted(objs):
        offsets[n] = len(out)
        out += b"%d 0 obj\n" % n + objs[n] + b"\nendobj\n"
    size = max(objs) + 1
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    for n in range(1, size):
        out += (b"%010d 00000 n \n" % offsets[n]) if n in offsets else b"0000000000 65535 f \n"
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, xref)
    return bytes(out)


def _stream(head: bytes, body: bytes) -> bytes:
    return b"<< " + head + b" /Length %d >>\nstream\n" % len(body) + body + b"\nendstream"


def nested_xobject_pdf(
    depth: int = 6, fanout: int = 10, text: str = "Good page one", heavy_pages: int = 1
) -> bytes:
    """Page 1 is plain text; page 2 draws a form that draws itself `fanout` times, `depth`
    levels down: fanout**(depth-1) full-page fills from about 3 KB (depth 5 takes seconds to
    render, each level ten times more); `heavy_pages` such pages follow page 1, all drawing
    the one form."""
    page = b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] "
    heavy = [100 + n for n in range(heavy_pages)]
    kids = b" ".join(b"%d 0 R" % n for n in [3, *heavy])
    objs = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, 1 + heavy_pages),
        3: page + b"/Resources << /Font << /F1 5 0 R >> >> /Contents 6 0 R >>",
        5: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        6: _stream(b"", b"BT /F1 28 Tf 72 700 Td (" + text.encode() + b") Tj ET"),
        7: _stream(b"", b"/X Do"),
    }
    for n in heavy:
        objs[n] = page + b"/Resources << /XObject << /X 10 0 R >> >> /Contents 7 0 R >>"
    form = b"/Type /XObject /Subtype /Form /BBox [0 0 595 842]"
    for level in range(depth):
        num = 10 + level
        if level == depth - 1:
            objs[num] = _stream(form, b"0 0 595 842 re f")
        else:
            draw = b"".join(b"q 1 0 0 1 %d 0 cm /X Do Q " % i for i in range(fanout))
            objs[num] = _stream(
                form + b" /Resources << /XObject << /X %d 0 R >> >>" % (num + 1), draw
            )
    return _pdf(objs)
