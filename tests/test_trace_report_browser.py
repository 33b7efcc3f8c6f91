"""The HTML trace report in a real browser (headless Chromium, Debian's `chromium` package):
it renders with no console error, and its DOM shows the expected ops and figures."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_trace import write_known_trace

from torch_fl.tools.trace.analysis import summarize
from torch_fl.tools.trace.load import load_trace
from torch_fl.tools.trace.report_html import render_html

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (apt-get install chromium)")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--enable-logging=stderr",
    "--v=0",
    "--window-size=1280,1600",
]
CONSOLE = re.compile(r":CONSOLE[:(]")


def chromium(tmp_path: Path, page: Path, *args: str) -> tuple[str, list[str]]:
    """Load a page headless; (stdout, console messages from the browser log)."""
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    res = subprocess.run(
        [CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args, page.as_uri()],
        capture_output=True,
        text=True,
        timeout=90,
    )
    return res.stdout, [line for line in res.stderr.splitlines() if CONSOLE.search(line)]


@pytest.fixture(scope="module")
def report_page(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("report")
    page = tmp / "report.html"
    page.write_text(render_html(summarize(load_trace(write_known_trace(tmp / "known.json")))))
    return page


def test_report_renders_without_console_errors(tmp_path, report_page):
    dom, console = chromium(tmp_path, report_page, "--dump-dom")
    assert console == []
    assert 'data-rendered="true"' in dom  # the script ran to its end
    errors = re.search(r'<div id="errors"([^>]*)><b>[^<]*</b><ul>(.*?)</ul>', dom)
    assert errors and "hidden" in errors.group(1) and errors.group(2) == ""
    hot = dom[dom.index('id="hot-ops"') :]
    hot = hot[: hot.index("</table>")]
    assert hot.index("aten::mm.default") < hot.index("aten::gelu.default") < hot.index("aten::add.Tensor")
    for figure in ("60.0%", "30.0%", "10.0%", "600.0 µs"):
        assert figure in hot
    fallbacks = dom[dom.index('id="fallbacks"') :]
    assert "aten::gelu.default" in fallbacks and "300.0 µs" in fallbacks
    leaks = dom[dom.index('id="leaks-section"') : dom.index('id="fallbacks"')]
    assert "1.00 MiB" in leaks and "model.py:12 in forward" in leaks
    assert "peak <b>3.00 MiB</b>" in dom
    assert '<canvas id="timeline"' in dom and "ral:1 Portable OpenCL" in dom


def test_error_detection_works(tmp_path):
    # The check above must be able to fail: a page that throws is caught by both signals.
    page = tmp_path / "broken.html"
    page.write_text('<div id="errors" hidden><ul></ul></div><script>throw new Error("boom")</script>')
    _, console = chromium(tmp_path, page, "--dump-dom")
    assert any("boom" in line for line in console)


def test_report_screenshot(tmp_path, report_page):
    shot = tmp_path / "shot.png"
    _, console = chromium(tmp_path, report_page, f"--screenshot={shot}")
    assert console == []
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000
