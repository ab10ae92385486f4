"""Browser tests: the dashboard in a real Chromium, served by a real gunicorn.

A browser test does what a person does and nothing else: it opens pages, finds fields by
their label (`page.get_by_label("Email")`) and buttons and links by role and visible name
(`page.get_by_role("button", name="Save")`), and checks what the page shows with
Playwright's `expect`. It arranges its data through the services or the API, like the other
tests, on the test's own database, which the server serves too.

After every page it visits (a `goto`, a link followed, a form sent) it calls `shot(name)`,
which saves a screenshot as NN-name.png under the test's tmp_path / "screenshots" and checks
the page: a title, exactly one <h1>, a label on every form field, an icon that loads; every
time shown says it is UTC (in its text, its table column's header or its term), no date
picker (it would show the browser's own zone and format), never Python's "None"; and no
accessibility problem that axe-core (tests/system/browser/axe) rates critical or serious. A test
that leaves a page without a screenshot fails, and so does one whose page loaded anything
from another host, answered 5xx or raised a JavaScript error.

For each page of the dashboard, its browser tests:
- reach it as a person does, from the menu or a link by its visible name, and check its <h1>;
- make each change the page offers through its form (fields by label, the button names of
  DESIGN.md section 8), and see the outcome on the page that follows (the flash message, the
  row in the list); where it counts, check it through the API too (`client.get("/api/v1/...",
  headers=headers)`: the in-process app of tests/conftest.py shares the database);
- go through the confirmation step of a destructive button (Delete, Revoke, Disable);
- send the form once with bad input and see the message next to its field;
- as a viewer (`signed_in("viewer")`), see the page without its change buttons.
A second person at the same time (a user the test's owner just added, say) gets a browser
of their own: `open_page()` is a page in a fresh browser context, watched the same way, and
`shot(name, on=that_page)` screenshots it.
Data comes from the fixtures of tests/conftest.py (tenant, headers, agent_id, did) and calls
from the runtime API of the server (`requests.post(f"{server}/internal/v1/calls", ...,
headers=runtime_headers)`). One short test each, e.g.:

    def test_the_agents_page_lists_agents(page, shot, signed_in, agent_id):
        signed_in("owner")
        page.get_by_role("link", name="Agents").click()
        expect(heading(page)).to_have_text("Agents")
        shot("agents")

Each test takes well under 5 s (most of it gunicorn starting); keep it so.
"""

import hashlib
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urljoin

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect, sync_playwright

from app.services import users as user_service
from tests.conftest import RUNTIME_TOKEN
from tests.dashboard.conftest import PASSWORD
from tests.helpers import ACTOR

TIMEOUT_MS = 10_000
VIEWPORT = {"width": 1280, "height": 800}
# Form fields that need no label: they are not shown, or are labelled by their own text.
UNLABELLED_FIELDS = """() => Array.from(document.querySelectorAll("input, select, textarea"))
    .filter(e => !["hidden", "submit", "button", "reset"].includes(e.type))
    .filter(e => e.labels.length === 0 && !e.getAttribute("aria-label"))
    .map(e => e.name || e.id || e.outerHTML)"""
# Times shown without saying they are UTC: "2026-11-21 09:15" not followed by UTC, outside a
# table column or a term (<dt>) whose text says UTC.
TIMES_WITHOUT_ZONE = r"""() => {
    const stamp = /\d{4}-\d{2}-\d{2} \d{2}:\d{2}(:\d{2})?/g;
    const saysUtc = (element) => element !== null && /UTC/.test(element.textContent);
    const column = (cell) => {
        const table = cell.closest("table");
        const head = table && table.tHead && table.tHead.rows[0];
        return head ? head.cells[cell.cellIndex] || null : null;
    };
    const term = (definition) => {
        let sibling = definition.previousElementSibling;
        while (sibling && sibling.tagName !== "DT") sibling = sibling.previousElementSibling;
        return sibling;
    };
    const found = [];
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) {
        const text = walker.currentNode.textContent;
        const parent = walker.currentNode.parentElement;
        for (const match of text.matchAll(stamp)) {
            if (/^\s*UTC/.test(text.slice(match.index + match[0].length))) continue;
            const cell = parent.closest("td, th");
            if (cell && saysUtc(column(cell))) continue;
            const definition = parent.closest("dd");
            if (definition && saysUtc(term(definition))) continue;
            found.push(text.trim().slice(0, 100));
        }
    }
    return found;
}"""
DATE_PICKERS = "input[type=date], input[type=datetime-local], input[type=time], input[type=month]"
AXE = (Path(__file__).parent / "axe" / "axe.min.js").read_text()
# What fails a page: violations of axe's rules (WCAG 2 A and AA, and its best practices) that
# it rates as blocking or seriously hindering someone.
BLOCKING_IMPACTS = ("critical", "serious")
AXE_RUN = """() => axe.run(document, {resultTypes: ["violations"]}).then(results =>
    results.violations.map(v => ({id: v.id, impact: v.impact, help: v.help,
                                  targets: v.nodes.map(n => n.target.join(" "))})))"""


# The page's elements as axe sees them: tags, classes and the attributes that change what a
# screen reader or the contrast check finds, not the text. A page whose layout was checked
# already in this run (the sign-in page of every test, say) is not checked again.
LAYOUT = """() => {
    const parts = [];
    const walk = (element, depth) => {
        const attributes = ["type", "role", "aria-invalid", "aria-describedby", "aria-label",
                            "disabled", "open", "hidden"].map(a => element.getAttribute(a) || "");
        parts.push(`${depth}${element.tagName}.${element.getAttribute("class") || ""}` +
                   `[${attributes.join(",")}]`);
        for (const child of element.children) walk(child, depth + 1);
    };
    walk(document.body, 0);
    return parts.join("|");
}"""
CHECKED_LAYOUTS: set[str] = set()


def accessibility_problems(page: Page) -> list[str]:
    """axe-core's critical and serious findings on the page, one line each (none for a
    layout already checked in this run)."""
    layout = hashlib.sha256(page.evaluate(LAYOUT).encode()).hexdigest()
    if layout in CHECKED_LAYOUTS:
        return []
    CHECKED_LAYOUTS.add(layout)
    if not page.evaluate("() => typeof axe === 'object'"):
        page.evaluate(AXE + "\n;undefined")  # evaluated, not a <script>: no CSP stops it
    return [
        f"{found['id']} ({found['impact']}): {found['help']}: {', '.join(found['targets'][:5])}"
        for found in page.evaluate(AXE_RUN)
        if found["impact"] in BLOCKING_IMPACTS
    ]


def chromium() -> str:
    """The Chromium to drive: $CHROMIUM, else the system's (Debian: apt-get install chromium).

    Playwright downloads no browser here; without one the run stops with a clear message,
    never a silent skip.
    """
    path = os.environ.get("CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.exit(
            f"The browser tests (tests/system/browser) need Chromium, and {path} is not there. "
            "Install it (Debian: `apt-get install chromium`) or set CHROMIUM=/path/to/chromium.",
            returncode=3,
        )
    return path


@pytest.fixture(scope="package")
def browser():
    """One headless Chromium for all the browser tests. Package scope, not session: while
    Playwright's sync API is running, asyncio.run() fails, so it stops once they are done."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium(), headless=True)
        yield browser
        browser.close()


@pytest.fixture
def server_settings() -> dict[str, str]:
    """More settings for the test's server; a test module overrides this fixture to add some."""
    return {}


@pytest.fixture
def server(app, workers, server_settings) -> str:
    """The service in gunicorn on a free loopback port, on the test's database; its base URL.

    http on loopback, so the session cookie is not Secure; jobs run inline in the web process.
    """
    return workers.start_web(
        workers=1,
        SECRET_KEY=app.config["SECRET_KEY"],
        SESSION_COOKIE_SECURE="false",
        RUNTIME_TOKEN=RUNTIME_TOKEN,
        QUEUE_MODE="inline",
        REDIS_URL="",
        LOG_FORMAT="text",
        **server_settings,
    )


@dataclass
class Visits:
    """What the test's pages did: documents loaded (by which page), screenshots taken,
    problems seen."""

    folder: Path
    server: str
    loaded: list[tuple[Page, str]] = field(default_factory=list)
    shot: set[int] = field(default_factory=set)
    screenshots: int = 0
    problems: list[str] = field(default_factory=list)

    def watch(self, page: Page) -> None:
        page.on("load", lambda loaded: self.loaded.append((loaded, loaded.url)))
        page.on("request", self.request)
        page.on("response", self.response)
        page.on("pageerror", lambda error: self.problems.append(f"JavaScript error: {error}"))

    def request(self, request) -> None:
        if not (request.url.startswith(self.server + "/") or request.url.startswith("data:")):
            self.problems.append(f"loaded from another host: {request.url}")

    def response(self, response) -> None:
        if response.status >= 500:
            self.problems.append(f"{response.status} from {response.url}")

    def mark_shot(self, page: Page) -> None:
        """The page's latest document has its screenshot."""
        for number in range(len(self.loaded), 0, -1):
            if self.loaded[number - 1][0] is page:
                self.shot.add(number)
                return

    def unshot(self) -> list[str]:
        return [url for number, (_, url) in enumerate(self.loaded, 1) if number not in self.shot]


REPORTS = pytest.StashKey[dict]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Keep each phase's report on the test, so the page fixture knows whether it failed."""
    report = yield
    item.stash.setdefault(REPORTS, {})[report.when] = report
    return report


@pytest.fixture
def visits(tmp_path, server) -> Visits:
    folder = tmp_path / "screenshots"
    folder.mkdir()
    return Visits(folder=folder, server=server)


@pytest.fixture
def open_page(request, browser: Browser, server: str, visits: Visits):
    """open_page(): a page in a fresh browser context (no cookies) on the server, watched like
    every page of the test: a second person's browser."""
    contexts: list[BrowserContext] = []

    def open_page() -> Page:
        context = browser.new_context(base_url=server, viewport=VIEWPORT)
        context.set_default_timeout(TIMEOUT_MS)
        contexts.append(context)
        page = context.new_page()
        visits.watch(page)
        return page

    yield open_page
    call = request.node.stash.get(REPORTS, {}).get("call")
    failed = call is None or call.failed
    for number, context in enumerate(contexts, 1):
        if failed:
            for page in context.pages:
                name = "failed.png" if number == 1 else f"failed-{number}.png"
                page.screenshot(path=visits.folder / name, full_page=True)
        context.close()
    if not failed:
        assert not visits.problems, "\n".join(visits.problems)
        assert not visits.unshot(), f"pages visited without a shot(): {visits.unshot()}"


@pytest.fixture
def page(open_page) -> Page:
    """The test's page on the server, in a fresh browser context: page.goto("/...")."""
    return open_page()


@pytest.fixture
def shot(page: Page, visits: Visits):
    """shot(name, on=page): screenshot the page now shown (the test's page, or another one
    from open_page()), after checking its markup."""

    def shot(name: str, on: Page | None = None) -> Path:
        shown = on or page
        shown.wait_for_load_state("load")
        expect(shown.locator("h1")).to_have_count(1)
        assert shown.title(), f"{shown.url} has no title"
        assert not shown.evaluate(UNLABELLED_FIELDS), f"fields without a label on {shown.url}"
        assert not shown.evaluate(TIMES_WITHOUT_ZONE), f"times without UTC on {shown.url}"
        assert shown.locator(DATE_PICKERS).count() == 0, f"a date picker on {shown.url}"
        assert not re.search(r"\bNone\b", shown.evaluate("() => document.body.textContent"))
        icon = shown.locator("link[rel=icon]").get_attribute("href")
        assert icon and shown.request.get(urljoin(shown.url, icon)).ok, f"no icon on {shown.url}"
        problems = accessibility_problems(shown)
        assert not problems, f"{shown.url}:\n" + "\n".join(problems)
        visits.screenshots += 1
        slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
        path = visits.folder / f"{visits.screenshots:02d}-{slug}.png"
        shown.screenshot(path=path, full_page=True)
        visits.mark_shot(shown)
        return path

    return shot


@pytest.fixture
def user(tenant):
    """user(role, email=None): a user of the test's tenant with PASSWORD; its email is
    "<role>@acme.test" unless given."""

    def user(role: str = "owner", email: str | None = None):
        return user_service.create_user(
            actor=ACTOR,
            tenant=tenant,
            email=email or f"{role}@acme.test",
            password=PASSWORD,
            role=role,
        )

    return user


def heading(page: Page):
    """The page's <h1>."""
    return page.get_by_role("heading", level=1)


def menu(page: Page):
    """The main menu, where the signed-in user finds the pages: menu(page).get_by_role("link",
    name="Calls")."""
    return page.get_by_role("navigation", name="Main")


def row(page: Page, text: str):
    """The first row of a table on the page with a cell of exactly this text."""
    return page.get_by_role("row").filter(has=page.get_by_role("cell", name=text, exact=True)).first


def headed_row(page: Page, text: str):
    """The first row of a table on the page whose row header is exactly this text."""
    header = page.get_by_role("rowheader", name=text, exact=True)
    return page.get_by_role("row").filter(has=header).first


def fill_sign_in(page: Page, email: str, password: str = PASSWORD) -> None:
    """Type the email and password into the sign-in form shown, and press Sign in."""
    page.get_by_label("Email").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()


@pytest.fixture
def signed_in(page: Page, shot, user):
    """signed_in(role): a new user of that role signs in through the form; on the Overview."""

    def signed_in(role: str = "owner"):
        person = user(role)
        page.goto("/dashboard/sign-in")
        shot("sign-in")
        fill_sign_in(page, person.email)
        expect(heading(page)).to_have_text("Overview")
        shot("overview")
        return person

    return signed_in
