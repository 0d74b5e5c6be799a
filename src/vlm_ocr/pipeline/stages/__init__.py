"""The stages a page goes through, one unit each, in the order `page.PageSequence` runs them:

    fetch_render ─► upright ─► reuse ─► recognize ─► layout ─► store ─► second_opinion

A stage takes the page's `PageWork`, reads what the stages before it found, and sets its own
field, or raises `PageError` (the one way a page fails). A stage that does not apply to a page
(a blank page needs no engine, a stored text no new reading) returns without doing anything.
"""
