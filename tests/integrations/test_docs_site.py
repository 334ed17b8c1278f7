"""The documentation site as built by ``mkdocs build --strict`` (mkdocs.yml, tools/mkdocs_hooks.py):
what a reader of it sees, checked on the built HTML, and in a headless Chromium where one is
installed (no server)."""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from html import unescape
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# the pages the site is built from: the guides, and the repository's README and CHANGELOG
SOURCES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]
BUILD_TIMEOUT = 600  # s: the first build fetches mermaid's npm package
BROWSER_TIMEOUT = 120  # s, for one page
MERMAID_FENCE = re.compile(r"^ *```mermaid$", re.MULTILINE)
DRAWN = '<pre class="mermaid">'  # what the theme replaces by the drawing
FENCED = re.compile(r"^ *(```|~~~).*?^ *\1", re.MULTILINE | re.DOTALL)
NESTED = re.compile(r"^ {1,3}(?:[-*+]|\d+\.) .*$", re.MULTILINE)
SCRIPT = re.compile(r'<script src="([^"]*mermaid\.min\.js)"></script>')


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("npm") is None:
        pytest.skip("no npm: the build fetches mermaid's script with it")
    out = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        check=True,
        timeout=BUILD_TIMEOUT,
    )
    return out


def _pages(site: Path) -> dict[Path, str]:
    return {page: page.read_text(encoding="utf-8") for page in sorted(site.rglob("*.html"))}


def test_every_mermaid_block_is_drawn_from_a_script_of_the_site(site: Path) -> None:
    pages = _pages(site)
    # a block left as code (no custom fence, or one it does not recognise) shows its source
    assert [page for page, html in pages.items() if "language-mermaid" in html] == []
    fences = sum(len(MERMAID_FENCE.findall(p.read_text(encoding="utf-8"))) for p in SOURCES)
    assert fences > 0
    assert sum(html.count(DRAWN) for html in pages.values()) == fences
    for page, html in pages.items():
        scripts = SCRIPT.findall(html)
        if DRAWN not in html:
            assert scripts == [], page  # (3.5 MB, for pages that draw nothing)
            continue
        assert len(scripts) == 1, page
        script = (page.parent / scripts[0]).resolve()
        assert script.is_relative_to(site), script  # the site's own copy, not a CDN's
        assert "mermaid" in script.read_text(encoding="utf-8")[:100_000]


def test_every_diagram_draws_in_a_browser(site: Path) -> None:
    """A diagram the script cannot parse stays on the page as its source text (and mermaid shows
    "Syntax error in text"): the theme swaps each ``<pre class="mermaid">`` for the drawing's
    ``<div class="mermaid">`` only once mermaid has drawn it."""
    browser = shutil.which("chromium")
    if browser is None:
        pytest.skip("no chromium (Debian's package) to draw the diagrams in")
    drawing = [page for page, html in _pages(site).items() if DRAWN in html]
    assert drawing
    for page in drawing:
        expected = page.read_text(encoding="utf-8").count(DRAWN)
        with tempfile.TemporaryDirectory() as profile:
            dom = subprocess.run(
                [
                    browser,
                    *("--headless", "--no-sandbox", "--disable-gpu", "--no-first-run"),
                    *("--disable-background-networking", "--disable-component-update"),
                    *("--disable-sync", f"--user-data-dir={profile}"),
                    "--virtual-time-budget=30000",  # (virtual: the page's timers, not a wait)
                    "--dump-dom",
                    page.as_uri(),
                ],
                capture_output=True,
                text=True,
                check=True,
                timeout=BROWSER_TIMEOUT,
            ).stdout
        relative = page.relative_to(site)
        assert dom.count(DRAWN) == 0, f"{relative}: a diagram not drawn"
        assert dom.count('<div class="mermaid">') == expected, relative
        assert "Syntax error" not in dom, relative


@pytest.mark.parametrize("module", ["fencelock", "fencelock.asyncio"])
def test_the_reference_leads_with_what_users_make_first(site: Path, module: str) -> None:
    """The client, the lock, the other primitives, then the errors, then the rest; every public
    name once (an explicit member list would drop a name it forgot)."""
    html = (site / "reference" / module / "index.html").read_text(encoding="utf-8")
    headings = [h.removeprefix(f"{module}.") for h in re.findall(r'<h2 id="([^"]+)"', html)]
    namespace = importlib.import_module(module)
    assert sorted(headings) == sorted(n for n in namespace.__all__ if not n.startswith("_"))
    assert headings[:5] == ["LockClient", "Lock", "Semaphore", "ReadWriteLock", "MultiLock"]
    primitives = {"Latch", "Barrier", "Election", "Versioned", "OncePer"}
    assert set(headings[5:10]) == primitives
    classes = {
        n: getattr(namespace, n) for n in headings if isinstance(getattr(namespace, n), type)
    }
    errors = [n for n, cls in classes.items() if issubclass(cls, Exception)]
    assert errors[0] == "LockError"
    assert headings[10 : 10 + len(errors)] == errors


# Characters of code a page's column shows without scrolling, at the theme's layout for screens
# 1220 px wide and more (navigation, page, table of contents): 80.2 measured in Chromium at 1280,
# 1440, 1920 and 2560 px (86 at 1024 px, 88 at 800, where the side columns fold away).
CODE_COLUMN = 80
# A block whose lines cannot be broken (a program's output as it prints it, one crontab line,
# one command) says so in a comment just before it: <!-- wide: why -->
CODE_BLOCK = re.compile(
    r"(<!-- wide: [^>]*-->\s*)?(?:<div[^>]*>\s*)?<pre(?! class=\"mermaid\")[^>]*>(.*?)</pre>",
    re.DOTALL,
)


def test_no_code_line_is_wider_than_the_column(site: Path) -> None:
    wide = []
    for page, html in _pages(site).items():
        for block in CODE_BLOCK.finditer(html):
            if block.group(1):
                continue
            text = unescape(re.sub(r"<[^>]+>", "", block.group(2)))
            relative = page.relative_to(site)
            wide += [f"{relative}: {line}" for line in text.splitlines() if len(line) > CODE_COLUMN]
    assert wide == []


# Markdown that GitHub renders and Python-Markdown shows as text: a heading, a table's rule or a
# link's syntax left in the text of a page (as in a <details> read without md_in_html)
AS_TEXT = re.compile(r"^#{1,6} |\|\s*-{3}|\]\(", re.MULTILINE)


def test_no_page_shows_markdown_as_text(site: Path) -> None:
    shown = []
    for page, html in _pages(site).items():
        article = re.search(r"<article[^>]*>(.*)</article>", html, re.DOTALL)
        if article is None:
            continue
        prose = re.sub(r"<(pre|code)[ >].*?</\1>", "", article.group(1), flags=re.DOTALL)
        text = unescape(re.sub(r"<[^>]+>", "", prose))
        shown += [f"{page.relative_to(site)}: {m.group(0)!r}" for m in AS_TEXT.finditer(text)]
    assert shown == []


def test_nested_list_items_are_indented_four_spaces() -> None:
    """GitHub nests a list item indented by two spaces; the site's Markdown needs four, and
    flattens the rest into the list above (no server, no build)."""
    shallow = []
    for source in SOURCES:
        prose = FENCED.sub("", source.read_text(encoding="utf-8"))
        shallow += [f"{source.name}: {line}" for line in NESTED.findall(prose)]
    assert shallow == []


def _mkdocs_setting(name: str) -> str:
    match = re.search(rf"^{name}: (\S+)$", (ROOT / "mkdocs.yml").read_text(encoding="utf-8"), re.M)
    assert match is not None, name
    return match.group(1)


SITE_URL = _mkdocs_setting("site_url")
REPO_URL = _mkdocs_setting("repo_url")


def _check_url(site: Path, url: str) -> None:
    """``url`` is a page of the docs site (and its anchor one of the page's), or a file of the
    repository (on its main branch), or the repository's issues."""
    address, _, anchor = url.partition("#")
    if address.startswith(SITE_URL):
        page = site / address.removeprefix(SITE_URL) / "index.html"
        assert page.is_file(), f"{url}: no page of the site"
        assert not anchor or f'id="{anchor}"' in page.read_text(encoding="utf-8"), url
    elif address.startswith(f"{REPO_URL}/blob/main/"):
        assert (ROOT / address.removeprefix(f"{REPO_URL}/blob/main/")).is_file(), url
    else:
        assert address in {REPO_URL, f"{REPO_URL}/issues"}, f"{url}: neither site nor repository"


def test_every_readme_link_is_absolute_and_leads_to_a_page_of_the_site(site: Path) -> None:
    """The package index shows the README, where a relative link (docs/leases.md) leads
    nowhere."""
    links = re.findall(r"\]\(([^)\s]+)\)", (ROOT / "README.md").read_text(encoding="utf-8"))
    assert len(links) > 20
    for link in links:
        _check_url(site, link)


def test_the_project_urls_are_the_site_and_the_repository(site: Path) -> None:
    urls = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["urls"]
    assert set(urls) == {"Homepage", "Documentation", "Source", "Changelog", "Issues"}
    assert urls["Documentation"] == SITE_URL
    assert urls["Source"] == REPO_URL
    for url in urls.values():
        _check_url(site, url)
