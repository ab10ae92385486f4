"""The documentation site as a reader opens it from the file system: built by mkdocs into a
temporary folder, its pages load nothing from another host, and search works without a
server."""

import os
import subprocess
import sys
from pathlib import Path

from playwright.sync_api import expect

ROOT = Path(__file__).resolve().parents[3]


def test_the_docs_site_opens_and_searches_from_files_alone(browser, tmp_path):
    site = tmp_path / "site"
    subprocess.run(
        [Path(sys.prefix) / "bin" / "mkdocs", "build", "--strict", "--site-dir", site],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=True,
        capture_output=True,
        timeout=120,
    )
    page = browser.new_page(viewport={"width": 1200, "height": 800})
    requested: list[str] = []
    page.on("request", lambda request: requested.append(request.url))
    try:
        page.goto((site / "index.html").as_uri())
        expect(page.get_by_role("heading", level=1)).to_contain_text("Voice Agent Management API")
        page.get_by_role("textbox", name="Search").fill("Idempotency-Key")
        results = page.locator(".md-search-result__item")
        # The search index is built in the page's worker first: seconds on a busy machine.
        expect(results.first).to_be_visible(timeout=20_000)
        expect(results.get_by_role("link").first).to_have_attribute(
            "href", (site / "api.html").as_uri()
        )
    finally:
        page.close()
    assert requested and all(url.startswith("file://") for url in requested), requested
