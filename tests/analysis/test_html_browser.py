"""The --html report as a person sees it: opened offline in a real headless browser (Debian's chromium, driven by
playwright; no browser is downloaded), it loads with no console error and no request leaving the file, every figure
draws, and the verdict is on the page. Skipped where chromium or playwright is missing (`.ci/run` installs chromium).
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest
from helpers import ROOT

from common.analysis.summary import main

FIXTURES = ROOT / "tests" / "fixtures"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# An H200 training step (every figure), a foreign trace with collectives, and a run of two gloo ranks (side by side)
TRACES = [
    FIXTURES / "h200" / "05_training_step" / "8_1024_768_12_3072_amp_bf16_cold_eager.json.gz",
    FIXTURES / "foreign" / "collectives.json.gz",
    FIXTURES / "ddp_gloo",
]

# Each figure's axis texts (titles, tick labels) that its legend's box covers, as "figure class: text"
OVERLAPS = """() => Array.from(document.querySelectorAll('div.figure')).flatMap(f => {
  const legend = f.querySelector('.legend'); if (!legend) return [];
  const box = legend.getBoundingClientRect();
  return Array.from(f.querySelectorAll('.xtitle, .ytitle, .xtick text, .ytick text')).filter(t => {
    const r = t.getBoundingClientRect();
    return r.width > 0 && r.left < box.right && r.right > box.left && r.top < box.bottom && r.bottom > box.top;
  }).map(t => f.className + ': ' + t.textContent);
})"""

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="no chromium here (apt-get install chromium)")


@pytest.fixture(scope="module")
def opened(tmp_path_factory) -> dict:
    """The report of TRACES opened in chromium: what it logged, what it asked for, its figures and a screenshot."""
    sync_api = pytest.importorskip("playwright.sync_api")
    pytest.importorskip("plotly")
    page_path = tmp_path_factory.mktemp("html") / "report.html"
    assert main([*map(str, TRACES), "--html", str(page_path)]) == 0
    seen: dict = {"errors": [], "requests": [], "figures": [], "text": "", "verdicts": []}
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.on("console", lambda m: seen["errors"].append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda exc: seen["errors"].append(str(exc)))

            def leave(route) -> None:
                seen["requests"].append(route.request.url)
                route.abort()

            page.route(lambda url: not url.startswith("file://"), leave)
            page.goto(page_path.as_uri(), wait_until="load")
            page.wait_for_function("document.querySelectorAll('div.figure .main-svg').length > 0")
            for figure in page.locator("div.figure").all():
                figure.scroll_into_view_if_needed()
                seen["figures"].append((figure.get_attribute("class"), figure.locator(".main-svg").count(),
                                        figure.screenshot()))  # fmt: skip
            seen["overlaps"] = page.evaluate(OVERLAPS)
            seen["text"] = page.inner_text("body")
            seen["verdicts"] = page.locator(".verdict-text").all_inner_texts()
            seen["screenshot"] = page.screenshot()
        finally:
            browser.close()
    return seen


def colours(png: bytes) -> int:
    """How many distinct colours a screenshot holds (1 for a blank one)."""
    from PIL import Image

    found = Image.open(io.BytesIO(png)).convert("RGB").getcolors(maxcolors=1 << 20)
    return len(found) if found is not None else 1 << 20


def test_the_report_loads_offline_without_a_console_error(opened):
    assert opened["errors"] == []


def test_the_report_asks_for_nothing_outside_its_file(opened):
    assert opened["requests"] == []


def test_every_figure_draws_in_the_browser(opened):
    kinds = [kind for kind, _, _ in opened["figures"]]
    assert len(kinds) >= 9 and {k.split()[1] for k in kinds} >= {"budget", "timeline", "roofline", "ranks"}
    assert [kind for kind, svgs, _ in opened["figures"] if svgs == 0] == []
    assert [kind for kind, _, png in opened["figures"] if colours(png) < 8] == []  # not blank: bars, axes, text


def test_the_page_shows_each_traces_verdict(opened):
    assert len(opened["verdicts"]) == 4 and all(v.startswith("verdict: ") for v in opened["verdicts"])
    assert "bound by the CPU" in opened["text"] and colours(opened["screenshot"]) > 50


def test_no_legend_covers_an_axis_title_or_tick_label(opened):
    assert opened["overlaps"] == []
