"""The web console end to end: headless Chromium (Playwright driving Debian's chromium)
against a warmrag on the session's real vLLM.

Screenshots of each page are kept in ``data/test-artifacts/console/`` (ignored by git).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, expect, sync_playwright

from tests.conftest import ADMIN_TOKEN, REPO, Service, ServiceFactory
from tests.fakes import FakeEngine

pytestmark = pytest.mark.browser

ARTIFACTS = REPO / "data" / "test-artifacts" / "console"
#: A cold chat, a warm cycle's prefills and ingest embeddings on a 2-core CPU.
SLOW_MS = 120_000
LIGHTHOUSE = {
    "id": "harwick.md",
    "text": "# Harwick lighthouse\n\nThe keeper of the Harwick lighthouse rings the fog bell "
    "at dusk, and lights the lamp when the fog comes in from the sea.",
    "metadata": {"title": "Harwick lighthouse"},
    "triples": [["Harwick lighthouse", "located in", "Harwick"]],
}
QUESTION = "Who rings the fog bell at the Harwick lighthouse?"
FERRY = (
    "# The Kellerby ferry\n\nThe Kellerby ferry crosses the river Zorn every hour from the "
    "old quay, and carries bicycles for free.\n"
)

# Records every text the newest answer showed, as it streamed in.
MUTATION_LOG = """() => {
  window.seenAnswers = [];
  const box = document.getElementById("answers");
  new MutationObserver(() => {
    const text = box.querySelector(".answer .text");
    if (text) window.seenAnswers.push(text.textContent);
  }).observe(box, { subtree: true, childList: true, characterData: true });
}"""


@pytest.fixture
def browser(chromium: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    # Chromium writes its crash-report settings and dconf's cache under the home
    # folder: give it one of the session's temporary folders instead of the user's.
    home = tmp_path_factory.mktemp("browser-home")
    env: dict[str, str | float | bool] = {
        **os.environ,
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
    }
    with sync_playwright() as playwright:
        # Chromium's sandbox cannot start as root (the test set-up's user here); a
        # container's small /dev/shm crashes full-page screenshots.
        args = ["--disable-dev-shm-usage", *(["--no-sandbox"] if os.geteuid() == 0 else [])]
        expect.set_options(timeout=SLOW_MS)  # assertions wait as long as actions
        browser = playwright.chromium.launch(executable_path=str(chromium), args=args, env=env)
        try:
            yield browser
        finally:
            browser.close()


class Console:
    """The console in one browser tab, with the page's script errors collected."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.errors: list[str] = []
        page.set_default_timeout(SLOW_MS)
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        page.on("console", self._console)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)

    def _console(self, message: ConsoleMessage) -> None:
        # Refused requests (the wrong token's 401) are logged by Chromium; they are expected.
        if message.type == "error" and "Failed to load resource" not in message.text:
            self.errors.append(message.text)

    def open(self, name: str) -> None:
        self.page.click(f"#nav a[data-page='{name}']")

    def shot(self, name: str) -> None:
        self.page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)

    def ask(self, question: str) -> tuple[str, list[str]]:
        """Ask, wait for the answer; its final text, and each text the page showed."""
        page = self.page
        page.evaluate(MUTATION_LOG)
        page.fill("#question", question)
        page.click("#ask")
        card = page.locator("#answers .answer").first
        expect(card).to_have_attribute("data-state", re.compile("done|error"))
        expect(card).to_have_attribute("data-state", "done")
        return card.locator(".text").inner_text(), page.evaluate("window.seenAnswers")


def test_chat_streams_and_an_admin_ingests_warms_and_watches(
    start_service: ServiceFactory, browser: Browser, tmp_path: Path
) -> None:
    # Every chat over a 1 ms first token is a bad case: the page has a group to show.
    service = start_service(warmup_document_queries=True, bad_case_ttft_ms=1.0)
    service.ingest(LIGHTHOUSE)
    console = Console(browser.new_page(viewport={"width": 1280, "height": 900}))
    page = console.page
    page.goto(service.url + "/")
    expect(page.locator("body")).to_have_attribute("data-ready", "true")

    # -- chat: the answer streams in, then its passages, graph facts and cache facts
    answer, seen = console.ask(QUESTION)
    partial = {text for text in seen if text and text != answer}
    assert answer.strip() and partial, f"the answer did not stream: {seen}"
    card = page.locator("#answers .answer").first
    assert int(card.get_attribute("data-tokens") or 0) >= 2
    expect(card.locator("[data-role=warm]")).to_have_text("cold")
    expect(card).to_have_attribute("data-served", "cold")
    expect(card.locator("[data-role=cached]")).to_contain_text("prompt tokens")
    expect(card.locator("[data-role=ttft]")).to_have_text(re.compile(r"first token [\d.]+ m?s"))
    first_passage = card.locator(".passages details").first
    expect(first_passage.locator("summary")).to_contain_text("harwick.md")
    first_passage.locator("summary").click()
    expect(first_passage.locator("pre")).to_contain_text("fog bell")
    expect(card.locator(".triples")).to_contain_text("Harwick lighthouse — located in — Harwick")
    console.shot("chat")

    # -- admin pages ask for the token, and keep it in this tab's session storage only
    console.open("documents")
    expect(page.locator("#page-login")).to_be_visible()
    page.fill("#admin-token", "not-the-token")
    page.click("#login")
    expect(page.locator("#login-error")).to_contain_text("wrong admin token")
    page.fill("#admin-token", ADMIN_TOKEN)
    page.click("#login")
    expect(page.locator("#page-documents")).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('warmrag.adminToken')") == ADMIN_TOKEN
    assert page.evaluate("localStorage.length") == 0
    expect(page.locator("#documents")).to_contain_text("harwick.md")

    # -- upload a file and paste a document: progress and each one's outcome
    ferry = tmp_path / "ferry.md"
    ferry.write_text(FERRY, encoding="utf-8")
    (tmp_path / "notes.docx").write_bytes(b"PK\x03\x04")
    page.set_input_files("#files", [str(ferry), str(tmp_path / "notes.docx")])
    page.click("#upload")
    expect(page.locator("#progress-text")).to_have_text("2 of 2 files · 1 failed")
    outcomes = page.locator("#outcomes tbody tr")
    expect(outcomes.filter(has_text="ferry.md")).to_contain_text("added 1")
    expect(outcomes.filter(has_text="notes.docx")).to_contain_text("415")
    expect(outcomes.filter(has_text="notes.docx")).to_contain_text("unsupported file type")
    page.fill("#paste-id", "notes/tide.md")
    page.fill("#paste-text", "The tide at Harwick turns at noon.")
    page.click("#paste")
    expect(outcomes.filter(has_text="pasted: notes/tide.md")).to_contain_text("added 1")
    rows = page.locator("#documents tbody tr")
    expect(rows).to_have_count(3)
    console.shot("documents")
    # delete asks twice
    delete = page.locator("#documents tr[data-id='notes/tide.md'] button")
    delete.click()
    expect(delete).to_have_text("Confirm delete")
    delete.click()
    expect(rows).to_have_count(2)
    assert sorted(service.runtime.kb.document_ids()) == ["ferry.md", "harwick.md"]

    # -- a warm cycle: the new document is in the registry, and the question is now warm
    console.open("warmup")
    page.click("#run-cycle")
    expect(page.locator("#cycle-result")).to_contain_text("Cycle done")
    registry = page.locator("#registry tbody")
    expect(registry).to_contain_text("ferry.md")
    expect(registry.locator("tr").first).to_contain_text("warm")
    expect(page.locator("#registry-declined")).to_have_text(
        "Warmup has declined nothing since start."
    )
    console.shot("registry")
    page.click("#nav a[data-page='chat']")
    console.ask(QUESTION)
    warm = page.locator("#answers .answer").first
    expect(warm).to_have_attribute("data-warm-state", "hit")
    expect(warm.locator("[data-role=warm]")).to_have_text("warm hit")
    console.shot("chat-warm")

    # -- traffic: both chats, one cold and one warm, in the heat maps
    console.open("traffic")
    expect(page.locator("#traffic-summary")).to_contain_text("2 chats in the window, 1 warm")
    for heat in ("#heat-warm", "#heat-cold"):
        expect(page.locator(f"{heat} rect[data-count='1']")).to_have_count(1)
    bars = page.locator("#hit-rate rect").count()  # the two chats may fall in two slices
    assert bars in (1, 2), bars
    console.shot("traffic")

    # -- the graph around an entity, the scheduler's jobs, the bad cases
    console.open("graph")
    page.fill("#entity", "Harwick lighthouse")
    page.click("#show-entity")
    expect(page.locator("#graph-triples")).to_contain_text("located in")
    expect(page.locator("#graph-view text.center")).to_have_text("Harwick lighthouse")
    expect(page.locator("#graph-view text.node")).to_have_text("Harwick")  # its one neighbour
    console.shot("graph")
    console.open("jobs")
    expect(page.locator("#jobs tbody tr").first).not_to_contain_text("no jobs")
    expect(page.locator("#reports tbody")).to_contain_text("hot")
    console.shot("jobs")
    console.open("bad-cases")
    expect(page.locator("#bad-summary")).to_contain_text("2 bad cases kept")
    group = page.locator("#bad-cases tbody tr").first
    expect(group).to_contain_text(QUESTION)
    expect(group).to_contain_text("slow 2")
    console.shot("bad-cases")

    # -- signing out forgets the token
    page.click("#sign-out")
    expect(page.locator("#page-login")).to_be_visible()
    assert page.evaluate("sessionStorage.getItem('warmrag.adminToken')") is None
    assert console.errors == []


#: One token, no space, of several hundred characters that never repeat themselves (the
#: repetition guard would stop a loop: this answer must reach the page whole).
LONG_TOKEN = "_".join(f"LOCK{i}MODE" for i in range(60))


def test_an_answer_of_one_long_token_keeps_the_page_width(
    start_fake_service: Callable[..., tuple[Service, FakeEngine]], browser: Browser
) -> None:
    """``FakeEngine`` stands in for vLLM: no model can be made to answer one long token."""
    service, _ = start_fake_service(engine=FakeEngine(answer=LONG_TOKEN))
    service.ingest(LIGHTHOUSE)
    console = Console(browser.new_page(viewport={"width": 1000, "height": 800}))
    page = console.page
    page.goto(service.url + "/")
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    width = page.evaluate("document.documentElement.scrollWidth")
    answer, _ = console.ask(QUESTION)
    assert answer == LONG_TOKEN
    assert page.evaluate("document.documentElement.scrollWidth") == width <= 1000
    box = page.locator("#answers .answer .text").bounding_box()
    assert box is not None and box["x"] + box["width"] <= 1000
    console.shot("long-token")
    assert console.errors == []
