"""What `vlm-ocr-lab bench` prints: failed pages first, by reason, then the figures.

A pace is only ever given for pages that came back `ok`: a pass whose every page failed has
none, and one with failures says so before anything else, so the pace of the pages that were
read is never taken for the run's. Blank pages (no ink, stored empty without the engine) are done
but not counted in the pace: they cost the engine nothing and would flatter it.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from vlm_ocr.engines.vllm.logs import summary as start_summary
from vlm_ocr_lab.measured import usd_per_million


def passes_of(fig: dict[str, Any]) -> list[dict[str, Any]]:
    return [*fig.get("earlier_passes", []), fig] if fig else []


def all_failures(fig: dict[str, Any]) -> Counter[str]:
    """Failed pages by reason over every pass (the worker's)."""
    return sum((Counter(p["failures"]) for p in passes_of(fig)), Counter())


def print_failures_first(
    fig: dict[str, Any], direct: dict[str, Any], start_error: str | None = None
) -> bool:
    """The run's failures before anything else; True when there were any."""
    if start_error is not None:
        print(
            f"FAILED: the engine did not start, so no page was read and there is no pace: "
            f"{start_error}"
        )
        return True
    worker = all_failures(fig)
    direct_failed = Counter(direct.get("failures", {}))
    if not worker and not direct_failed:
        return False
    passes = passes_of(fig)
    total = sum(p["pages"] for p in passes)
    paced = fig.get("pages_per_s") is not None or direct.get("pages_per_s") is not None
    print(
        f"FAILED: {sum(worker.values()):,} of {total:,} pages through the worker"
        + (
            f", {sum(direct_failed.values()):,} of {direct['pages']:,} on the direct path"
            if direct_failed
            else ""
        )
        + (
            "; the pace below counts only the pages that came back ok"
            if paced
            else "; no page came back ok, so there is no pace"
        )
    )
    for reason, count in worker.most_common():
        print(f"failed: {count} × {reason}")
    for reason, count in direct_failed.most_common():
        print(f"failed on the direct path: {count} × {reason}")
    return True


def pace(p: dict[str, Any]) -> str:
    """`pages/s: 3.01` of the ok pages, or why there is none."""
    if p.get("pages_per_s") is None:
        return "pages/s: none (no page came back ok)"
    return f"pages/s: {p['pages_per_s']:.2f}" + (
        f" (the {p['ok']:,} ok pages)" if p.get("failed") else ""
    )


def print_report(
    fig: dict[str, Any],
    engine: dict[str, Any],
    cold_start: float,
    store: str,
    gpu_price: float | None = None,
) -> None:
    print(
        f"engine: {engine['name']} {engine['version']} model={engine.get('model')} "
        f"concurrency={engine['concurrency']}  store: {store}"
    )
    print(f"cold start (start + warm-up): {cold_start:.2f} s", end="")
    if "spawn_to_healthy_s" in engine:
        print(
            f"  = spawn to healthy {engine['spawn_to_healthy_s']:.2f} s"
            f" + warm-up page {engine['warmup_s']:.2f} s",
            end="",
        )
    print()
    print_start(engine)
    if not fig:  # --pages 0: the start alone
        return
    print_passes(fig)
    direct = fig.get("direct")
    if direct:
        print_direct(fig, direct)
    print_timeline("worker", fig)
    print_timeline("direct", direct or {})
    print_transport(fig)
    if gpu_price:
        print_cost(gpu_price, fig, direct or {})


def print_passes(fig: dict[str, Any]) -> None:
    def totals(p: dict[str, Any]) -> str:
        blank = f"  blank: {p['blank']}" if p.get("blank") else ""
        cut = "  (cut by --time-limit)" if p.get("cut") else ""
        return (
            f"pages: {p['pages']}  failed: {p['failed']}{blank}  wall: {p['wall_s']:.2f} s  "
            f"{pace(p)}  output tokens/s: {p['output_tokens_per_s']:.0f}{cut}"
        )

    earlier = fig.get("earlier_passes", [])
    for n, p in enumerate(earlier, 1):
        print(f"pass {n}: {totals(p)}")
        print_timeline(f"pass {n}", p)
    print((f"pass {len(earlier) + 1}: " if earlier else "") + totals(fig))
    print(
        f"CPU per page: worker process (event loop, HTTP, JSON, store; and the CPU engine) "
        f"{fig['worker_cpu_ms_per_page']:.1f} ms, render processes "
        f"{fig['render_cpu_ms_per_page']:.1f} ms"
        + (
            f", CPU-model processes (orientation, second opinion) "
            f"{fig['cpu_models_cpu_ms_per_page']:.1f} ms ({fig['review']} pages to review)"
            if fig["cpu_models_cpu_ms_per_page"]
            else ""
        )
    )
    print(f"{'stage (s/page)':<16}{'p50':>10}{'p95':>10}{'mean':>10}")
    # total_s is each page's latency through the worker (render to stored)
    for stage, v in fig["stages"].items():
        print(f"{stage:<16}{v['p50']:>10.4f}{v['p95']:>10.4f}{v['mean']:>10.4f}")


def print_direct(fig: dict[str, Any], direct: dict[str, Any]) -> None:
    if "skipped" in direct:
        print(f"direct: skipped ({direct['skipped']})")
        return
    if direct.get("pages_per_s") is None:
        print("direct to server: pages/s: none (no page came back ok)")
        return
    ratio = (
        f"  worker/direct pages/s ratio {fig['pages_per_s'] / direct['pages_per_s']:.2f}"
        if fig.get("pages_per_s") is not None
        else ""
    )
    first = " (before the worker's passes)" if direct.get("first") else ""
    print(
        f"direct to server{first}: {pace(direct)}  output tokens/s "
        f"{direct['output_tokens_per_s']:.0f}  latency p50 "
        f"{direct['p50']:.3f} s p95 {direct['p95']:.3f} s{ratio}"
    )


def print_start(engine: dict[str, Any]) -> None:
    """The engine's start as vLLM's log took it apart, and what it started with."""
    if phases := engine.get("cold_start"):
        print(f"cold start by vLLM's log: {start_summary(phases)}")
    if "api_server_count" in engine:
        caches = engine.get("caches", {})
        print(
            f"API servers: {engine['api_server_count']}, start mode: {engine.get('start_mode')}, "
            f"caches: {caches.get('state')}"
            + (f" ({caches['folder']})" if "folder" in caches else "")
        )


def print_transport(fig: dict[str, Any]) -> None:
    """Requests sent again (every pass together), the memory after each pass, and what the
    soak's engine did."""
    passes = passes_of(fig)
    print(
        f"transport: {sum(p['sent_again'] for p in passes)} requests sent again after a "
        f"transport failure, on {sum(p['pages_sent_again'] for p in passes)} pages"
    )
    first, last = passes[0]["peak_mb"], passes[-1]["peak_mb"]
    if len(passes) == 1:
        print(f"worker memory: peak {first:.0f} MB")
    else:
        print(
            f"worker memory: peak {first:.0f} MB after pass 1 ({passes[0]['pages']:,} pages), "
            f"{last:.0f} MB after pass {len(passes)} ({sum(p['pages'] for p in passes):,} pages "
            f"in all): {100 * (last / first - 1):+.1f} %"
        )
    if stats := fig.get("instant_engine"):
        lost = {k.removeprefix("fault "): v for k, v in sorted(stats.items()) if "fault" in k}
        print(
            f"instant engine: {stats.get('requests', 0):,} requests, "
            f"{sum(lost.values()):,} lost on the way ("
            + ", ".join(f"{k} {v}" for k, v in lost.items())
            + f"), {stats.get('slow', 0):,} answered slowly"
        )
    if stats := fig.get("batching_engine"):
        print(
            f"batching engine: {stats.get('requests', 0):,} requests, "
            f"{stats.get('intake steps', 0):,} steps taking a page in, "
            f"{stats.get('decode steps', 0):,} decoding, at most {stats.get('most running', 0)} "
            "running"
        )


def print_cost(price: float, fig: dict[str, Any], direct: dict[str, Any]) -> None:
    """What a million pages cost at `price` US$ an hour for the worker's GPUs (none without a
    pace: a million failed pages are not a price)."""
    if fig.get("pages_per_s") is None:
        return
    line = (
        f"cost at US${price:g}/hour: US${usd_per_million(fig['pages_per_s'], price):,.2f} "
        "per million pages"
    )
    if direct.get("pages_per_s"):
        line += f" (direct path US${usd_per_million(direct['pages_per_s'], price):,.2f})"
    print(line)


def print_timeline(name: str, figures: dict[str, Any]) -> None:
    if t := figures.get("timeline"):
        print(
            f"{name} timeline: first request at {t['first_request_s']:.2f} s, end "
            f"{t['after_last_answer_s']:.2f} s after the last answer, requests in flight "
            f"{t['mean_in_flight']:.1f} on average, {t['peak_in_flight']} at most "
            f"from {t['peak_from_s']:.2f} s to {t['peak_until_s']:.2f} s"
        )
        if textless := t.get("answers_without_text"):
            print(
                f"{name}: {textless} answers came back with no text (a stand-in model's "
                "degenerate answers: the API servers' detokenizer, not the engine, may have held "
                "the pace; dev/gpu/detokenize_cost.py)"
            )
