"""Job input validation: every bad input names its field and what is accepted."""

from __future__ import annotations

import pytest

from vlm_ocr.contract import JobInput, parse_selection
from vlm_ocr.errors import InputError
from vlm_ocr.pipeline.sources import select_pages


def error_of(raw: object) -> InputError:
    with pytest.raises(InputError) as info:
        JobInput.parse(raw, max_pages=100)
    return info.value


def test_valid_pdf_and_images() -> None:
    job = JobInput.parse({"pdf": {"url": "https://example.com/a.pdf"}, "pages": "1-3,7"})
    assert job.pdf is not None and job.pdf.kind == "url"
    job = JobInput.parse({"images": [{"base64": "AAAA"}, {"key": "up/p2.png"}]})
    assert [s.kind for s in job.images or []] == ["base64", "key"]


@pytest.mark.parametrize(
    ("raw", "field", "says"),
    [
        ({}, "input", "give exactly one document"),
        ({"pdf": {"base64": "x"}, "images": [{"base64": "x"}]}, "input", "not both"),
        ({"pdf": {"base64": "x"}, "pages": "3-1"}, "input.pages", "ranges go up"),
        ({"pdf": {"base64": "x"}, "pages": "first"}, "input.pages", '"1-3,7"'),
        ({"pdf": {"base64": "x"}, "pages": "0"}, "input.pages", "pages start at 1"),
        ({"images": [{"base64": "x"}], "pages": "1"}, "input.pages", "applies to `pdf` only"),
        ({"pdf": {"base64": "x"}, "prompt": "poetry"}, "input.prompt", "legal-zh-tw"),
        (
            {"pdf": {"base64": "x"}, "prompt": "plain", "custom_prompt": "x"},
            "input.prompt",
            "not both",
        ),
        (
            {"pdf": {"base64": "x"}, "return_text": "yes"},
            "input.return_text",
            "accepted: true or false",
        ),
        ({"images": "a.png"}, "input.images", 'got the text "a.png"; accepted: a list'),
        ({"images": []}, "input.images", "got an empty list; accepted: a list of at least 1"),
        ({"pdf": {}}, "input.pdf", "exactly one of `base64`, `url` or `key`"),
        ({"pdf": {"base64": "x", "url": "https://a"}}, "input.pdf", "got base64 and url"),
        ({"pdf": {"base64": 5}}, "input.pdf.base64", "got the number 5; accepted: text"),
        ({"pdf": {"base64": "x"}, "colour": 1}, "input.colour", "accepted fields: pdf, pages"),
        ({"pdf": {"base64": "x"}, "output_prefix": "../x"}, "input.output_prefix", "letters"),
        ({"pdf": {"base64": "x"}, "output_prefix": "a/b\n"}, "input.output_prefix", "segment"),
        ({"pdf": {"base64": "x"}, "output_prefix": "a//b"}, "input.output_prefix", "segment"),
        ({"pdf": {"base64": "x"}, "output_prefix": "a/./b"}, "input.output_prefix", "segment"),
        ({"pdf": {"base64": "x"}, "output_prefix": "a/b/"}, "input.output_prefix", "trailing"),
        ({"pdf": {"base64": "x"}, "output_prefix": "a/b "}, "input.output_prefix", "letters"),
        ({"pdf": {"key": ""}}, "input.pdf.key", "accepted: text of 1 to 1,024 characters"),
        ({"pdf": {"base64": "x"}, "pages": "1- ," * 24 + "x"}, "input.pages", "not a page"),
        ({"pdf": {"base64": "x"}, "pages": "1," * 600}, "input.pages", "at most 1000"),
        (
            {"pdf": {"base64": "x"}, "max_pixels": 10},
            "input.max_pixels",
            "got the number 10; accepted: a whole number from 65,536 to 16,000,000",
        ),
        ({"pdf": {"base64": "x"}, "headers_footers": 1}, "input.headers_footers", '"drop" or'),
        ("just a string", "input", "JSON object"),
    ],
)
def test_bad_input_names_field(raw: object, field: str, says: str) -> None:
    err = error_of(raw)
    assert err.field == field
    assert says in err.message


def test_a_misspelled_field_is_said_with_the_one_meant_and_counted_as_it() -> None:
    fields = "accepted fields: pdf, pages, images, prompt"
    err = error_of({"imgaes": [{"url": "https://example.com/a.png"}], "promt": "plain"})
    assert [line.split(fields)[0] for line in err.lines()] == [
        "input.imgaes: unknown field (did you mean `images`?); ",
        "input.promt: unknown field (did you mean `prompt`?); ",
    ]  # and not "give exactly one document" besides: it gave one, misspelled
    for name, shape in (
        ("pdf_url", '`{"pdf": {"url": …}}`'),
        ("images_base64", '`{"images": [{"base64": …}]}`'),
    ):
        [line] = error_of({name: "x"}).lines()
        assert line.startswith(f"input.{name}: unknown field (give it as {shape}); {fields}")
    assert (
        error_of({"pdf": {"ulr": "https://a"}})
        .lines()[0]
        .startswith(
            "input.pdf.ulr: unknown field (did you mean `url`?); accepted fields: base64, url"
        )
    )
    [unknown, none] = error_of({"colour": 1}).lines()  # nothing near: no guess
    assert unknown.startswith(f"input.colour: unknown field; {fields}")
    assert none.startswith("input: give exactly one document")
    # a name of a megabyte is said by its first characters, not echoed whole
    [long, _] = error_of({"x" * 1_000_000: 1}).lines()
    assert long.startswith("input." + "x" * 60 + "…: unknown field;") and len(long) < 1000


def test_every_problem_of_an_input_is_named_at_once_with_what_is_accepted() -> None:
    err = error_of({"pages": 5, "return_text": "yes", "max_side": "big"})
    assert err.lines() == [
        'input.pages: got the number 5; accepted: text such as "1-3,7" or "5-"',
        'input.return_text: got the text "yes"; accepted: true or false',
        'input.max_side: got the text "big"; accepted: a whole number from 256 to 8,192',
        "input: give exactly one document: `pdf` (one PDF) or `images` (a list of page images)",
    ]
    assert str(err) == "; ".join(err.lines())  # the job's one-line error says them all


def test_each_bad_source_and_each_rule_broken_is_named() -> None:
    raw = {
        "images": [{"base64": "x"}, "p2.png", {"url": "https://a", "key": "b"}],
        "pages": "1",
        "prompt": "plain",
        "custom_prompt": "read it",
        "searchable_pdf": True,
        "json_schema": {"type": "object"},
    }
    fields = [line.split(":")[0] for line in error_of(raw).lines()]
    assert fields == [
        "input.images[1]",
        "input.images[2]",
        "input.pages",
        "input.prompt",  # a preset and a custom prompt
        "input.prompt",  # a preset with a JSON schema
        "input.searchable_pdf",
    ]


def test_too_many_images() -> None:
    err = error_of({"images": [{"base64": "x"}] * 101})
    assert err.field == "input.images" and "at most 100" in err.message


def test_selection_parsing() -> None:
    assert parse_selection("1-3, 7,10-") == [(1, 3), (7, 7), (10, None)]
    assert select_pages("1-3,7,2", 8, 100) == ([1, 2, 3, 7], "")
    assert select_pages(None, 3, 100) == ([1, 2, 3], "")
    assert select_pages("6-", 8, 100) == ([6, 7, 8], "")
    assert select_pages("3-5,9", 4, 100) == ([3, 4], "5, 9")
    with pytest.raises(InputError, match="more than 10 pages"):
        select_pages("1-50", 100, 10)
    # no selection given: not blamed on one, and the parts to ask for are said
    with pytest.raises(InputError) as info:
        select_pages(None, 2001, 2000)
    assert info.value.field == "input.pages" and info.value.message == (
        "the document has 2,001 pages, over the 2,000 a job reads (MAX_PAGES_PER_JOB); read it in "
        'parts ("1-2000", then "2001-") or raise MAX_PAGES_PER_JOB'
    )


def test_selection_beyond_the_end_is_counted_by_ranges_not_pages() -> None:
    # The same answer however far the range goes, and no page-by-page work beyond the end.
    assert select_pages("1-2000", 3, 2000) == ([1, 2, 3], "4-2000")
    assert select_pages("1-999999", 3, 2000) == ([1, 2, 3], "4-999999")
    assert select_pages("2-,5-", 3, 10) == ([2, 3], "5-")  # an open end stops at the last page
    with pytest.raises(InputError, match="selects no page of this document, which has 3"):
        select_pages("7-9999999", 3, 2000)
    # any page number a person may write is one: "to the end" as a large number
    assert select_pages("1-999999999999", 3, 2000) == ([1, 2, 3], "4-999999999999")


def test_null_is_a_field_not_given() -> None:
    # typed clients send every unset option as null: it is the field's default, whatever its type
    unset = ["pages", "prompt", "max_pixels", "second_opinion", "return_text", "presign_urls"]
    unset += ["searchable_pdf", "headers_footers", "json_schema", "images"]
    job = JobInput.parse({"pdf": {"url": "https://example.com/a.pdf"}} | dict.fromkeys(unset))
    assert job == JobInput.parse({"pdf": {"url": "https://example.com/a.pdf"}})
    assert error_of({"pdf": None}).message.startswith("give exactly one document")
