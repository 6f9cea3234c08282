"""Submit-to-next-pair time on the labelling screen, in Chromium: the pair switch without a page load
(the next pair reserved while the current one is read) against the full page load (the screen
without its script: the form posts, the server redirects, the next page loads).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/concord_bench \\
    CELERY_BROKER_URL=redis://127.0.0.1:6379/12 \\
        .venv/bin/python bench/bench_pair_switch.py [--pairs 100] [--read-ms 400]

The database named in DATABASE_URL is emptied and rebuilt (migrate + flush) first, with the bench
project of bench/stack.py (20,000 pairs, overlap 3) and two logged-in annotators, one per mode;
the static files are collected (``collectstatic`` into the ignored staticfiles/). gunicorn serves
Django on loopback (DEBUG off; --workers x --threads); headless Chromium (Debian's, through
Playwright) drives the screen, with a pause of --read-ms on each pair as an annotator reading (that
is when the next pair is reserved).

Measured in the page with performance.now():
- switch: from the Enter keydown to the next animation frame after the new pair is in the document
  (label.js's ``concord:pair-shown`` event); and, beside it, to the server's answer applied (the
  verdict stored and the pair after it reserved, in the background);
- full page: from the form submission (the navigation's start) to the end of the next page's load
  event (Navigation Timing; the redirect included), with label.js blocked so that the form posts as
  it did before the switch existed.
Prints one JSON object: percentiles of both in ms, the machine (CPU model and flags, cores, load),
PostgreSQL's version and the server setup.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import stack

CHROMIUM = os.environ.get("CONCORD_CHROMIUM", "/usr/bin/chromium")
CPU_FLAGS = ("sse4_2", "avx", "avx2", "avx512f", "avx512_bf16", "amx_tile", "neon", "asimd")

# Press Enter (the pick is already made) and resolve with the milliseconds until the frame after
# the next pair was swapped in, and until the server's answer was applied (the verdict stored, the
# pair after it reserved: the form's data-pending back to 0).
_SWITCH_JS = """
() => new Promise((resolve) => {
  const form = document.getElementById("verdict");
  const started = performance.now();
  let shown = null;
  const observer = new MutationObserver(() => {
    if (shown !== null && form.dataset.pending === "0") {
      observer.disconnect();
      resolve([shown, performance.now() - started]);
    }
  });
  observer.observe(form, { attributes: true, attributeFilter: ["data-pending"] });
  document.addEventListener("concord:pair-shown", () => {
    requestAnimationFrame(() => { shown = performance.now() - started; });
  }, { once: true });
  document.dispatchEvent(new KeyboardEvent("keydown", { key: "Enter", code: "Enter", bubbles: true }));
})
"""
_FULL_PAGE_JS = "() => performance.getEntriesByType('navigation')[0].loadEventEnd"


def machine() -> dict[str, object]:
    """The CPU model and its vector flags, cores and load average, PostgreSQL's version."""
    model, flags = platform.processor() or "unknown", []
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() in ("flags", "Features"):
                present = set(value.split())
                flags = [flag for flag in CPU_FLAGS if flag in present]
                break
    return {
        "cpu": model,
        "cpu_flags": flags,
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
    }


def postgres_version(env: dict[str, str]) -> str:
    code = (
        "import json\nfrom django.db import connection\n"
        "with connection.cursor() as c:\n    c.execute('SHOW server_version')\n"
        "    print(json.dumps(c.fetchone()[0]))\n"
    )
    return stack._django(code, env)


def _context(browser, base: str, session_key: str):
    context = browser.new_context(base_url=base)
    context.add_cookies([{"name": "sessionid", "value": session_key, "url": base}])
    context.set_default_timeout(30_000)
    return context


def measure_switch(
    browser, base: str, session_key: str, pairs: int, read_ms: int
) -> list[tuple[float, float]]:
    """Milliseconds from Enter to the next pair on screen, and to the server's answer applied,
    ``pairs`` times."""
    context = _context(browser, base, session_key)
    try:
        page = context.new_page()
        page.goto(stack.LABEL_PATH)
        times = []
        for _ in range(pairs + 1):
            page.wait_for_selector('#verdict[data-pending="0"]')
            page.wait_for_timeout(read_ms)
            page.keyboard.press("1")
            times.append(page.evaluate(_SWITCH_JS))
        return times[1:]  # the first switch warms the page up
    finally:
        context.close()


def measure_full_page(
    browser, base: str, session_key: str, pairs: int, read_ms: int
) -> list[float]:
    """Milliseconds from the form submission to the next page loaded, ``pairs`` times."""
    context = _context(browser, base, session_key)
    context.route("**/label.js", lambda route: route.abort())
    try:
        page = context.new_page()
        page.goto(stack.LABEL_PATH)
        times = []
        for _ in range(pairs + 1):
            page.wait_for_timeout(read_ms)
            with page.expect_navigation(wait_until="load"):
                page.locator('button[data-pick="left"]').click()
            times.append(page.evaluate(_FULL_PAGE_JS))
        return times[1:]
    finally:
        context.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=100, help="switches measured per mode")
    parser.add_argument("--read-ms", type=int, default=400, help="pause on each pair (ms)")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")
    parser.add_argument("--threads", type=int, default=2, help="threads per gunicorn worker")
    parser.add_argument("--comparisons", type=int, default=20_000)
    args = parser.parse_args()
    stack.require_postgres()
    from playwright.sync_api import sync_playwright

    env = stack.server_env()
    keys = stack.prepare(env, annotators=2, comparisons=args.comparisons)
    # DEBUG is off, as in production: whitenoise serves the static files from STATIC_ROOT.
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--no-input", "-v0"],
        cwd=stack.ROOT,
        env=env,
        check=True,
    )
    load_before = os.getloadavg()
    started = time.monotonic()
    with (
        stack.gunicorn(env, workers=args.workers, threads=args.threads) as server,
        sync_playwright() as playwright,
    ):
        browser = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            switch = measure_switch(browser, server.base, keys[0], args.pairs, args.read_ms)
            full = measure_full_page(browser, server.base, keys[1], args.pairs, args.read_ms)
        finally:
            browser.close()
    confirmed = [answered for _, answered in switch]
    switch = [shown for shown, _ in switch]
    p95_switch = stack.percentiles(switch).get("p95")
    p95_full = stack.percentiles(full).get("p95")
    print(
        json.dumps(
            {
                "benchmark": "labelling pair switch (Chromium)",
                "date": datetime.now(UTC).isoformat(timespec="seconds"),
                "machine": {**machine(), "load_average_before": load_before},
                "postgresql": postgres_version(env),
                "server": {
                    "gunicorn_workers": args.workers,
                    "gunicorn_threads": args.threads,
                    "debug": False,
                    "network": "loopback",
                    "comparisons": args.comparisons,
                },
                "read_ms": args.read_ms,
                "seconds": round(time.monotonic() - started, 1),
                "switch_ms": stack.percentiles(switch),
                "switch_answered_ms": stack.percentiles(confirmed),
                "full_page_ms": stack.percentiles(full),
                "p95_full_page_over_switch": (
                    round(p95_full / p95_switch, 1) if p95_switch and p95_full else None
                ),
                "goal_p95_under_100_ms": bool(p95_switch is not None and p95_switch < 100),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
