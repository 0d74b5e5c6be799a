"""One page, start to end: its stages in order, and its report.

    fetch + render ─► upright ─► reuse ─► recognize ─► layout ─► store ─► second opinion
        ─► PageReport

A page holds one place among the rendered pages from rendering until the engine is done with
it, so memory follows the engine's size, not the number of pages jobs put in flight. Every page
is independent: whatever fails, the page's report says so and the job's other pages go on. The
first failure that also stops the job (the store, the engine) is recorded here, once.
"""

from __future__ import annotations

import asyncio
import logging

from ..contract import PageReport
from ..errors import PageError
from .sources import PageRef
from .stages.fetch_render import FetchRender
from .stages.layout import Layout
from .stages.recognize import Recognize
from .stages.reuse import Reuse
from .stages.second_opinion import SecondOpinion
from .stages.store import StoreText
from .stages.upright import Upright
from .state import JobContext, PageWork

log = logging.getLogger(__name__)


class PageSequence:
    def __init__(
        self,
        *,
        render: FetchRender,
        upright: Upright,
        reuse: Reuse,
        recognize: Recognize,
        layout: Layout,
        store: StoreText,
        second_opinion: SecondOpinion,
        rendered_slots: asyncio.Semaphore,
    ) -> None:
        self.render = render
        self.upright = upright
        self.reuse = reuse
        self.recognize = recognize
        self.layout = layout
        self.store = store
        self.second_opinion = second_opinion
        self.rendered_slots = rendered_slots

    async def run(self, ref: PageRef, job: JobContext) -> PageReport:
        page = PageWork(ref, job)
        try:
            async with self.rendered_slots:  # from rendering until the engine is done with it
                await self.render.run(page)
                await self.upright.run(page)
                await self.reuse.run(page)
                self.second_opinion.begin(page)
                await self.recognize.run(page)
                await self.layout.run(page)
            await self.store.run(page)
            await self.second_opinion.judge(page)  # the text is safe: now judge it
        except PageError as exc:
            page.error = exc
        except Exception as exc:  # a bug must fail this page, not the job's other pages
            log.exception("page %s failed unexpectedly", ref.number)
            page.error = PageError(
                "internal", f"internal error ({type(exc).__name__}); see the log"
            )
        finally:
            self.second_opinion.cancel(page)
        if page.error is not None and page.error.stop is not None and job.stop is None:
            job.stop = page.error.stop
        report = page.report()
        job.finished(report)
        return report
