"""Property-based: no string or JSON value makes the job schema or the page-selection parser
raise anything but the schema's own input error."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vlm_ocr.contract import JobInput, parse_selection
from vlm_ocr.errors import InputError
from vlm_ocr.pipeline.sources import select_pages

FIELDS = ["pdf", "images", "pages", "prompt", "custom_prompt", "output_prefix", "max_pixels"]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.sampled_from([*FIELDS, "base64", "url", "key", "x"]), inner, max_size=4
        )
    ),
    max_leaves=20,
)
selection_text = st.text(alphabet="0123456789-, x\n", max_size=1200)
relaxed = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@relaxed
@given(selection_text)
def test_any_selection_parses_or_says_why(text: str) -> None:
    try:
        ranges = parse_selection(text)
    except InputError as exc:
        assert exc.field == "input.pages"
        return
    assert all(lo >= 1 and (hi is None or hi >= lo) for lo, hi in ranges)


@relaxed
@given(selection_text, st.integers(1, 5000), st.integers(1, 3000))
def test_any_selection_selects_pages_that_exist(text: str, count: int, cap: int) -> None:
    try:
        chosen, _ = select_pages(text, count, cap)
    except InputError as exc:
        assert exc.field == "input.pages"
        return
    assert chosen == sorted(set(chosen)) and 1 <= len(chosen) <= cap
    assert chosen[0] >= 1 and chosen[-1] <= count


@relaxed
@given(st.dictionaries(st.sampled_from(FIELDS), json_values, max_size=5) | json_values)
def test_any_json_is_a_job_or_an_input_error(raw: object) -> None:
    try:
        JobInput.parse(raw, max_pages=100)
    except InputError as exc:
        assert exc.field.startswith("input")
