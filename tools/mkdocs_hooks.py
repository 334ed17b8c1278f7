"""MkDocs hooks (mkdocs.yml): the site is built from the files as they are read on GitHub.

- The repository's README.md is the home page and CHANGELOG.md the changelog page, with their
  links into docs/ made relative to docs/ (``docs/leases.md`` -> ``leases.md``); the guides'
  index, docs/README.md, moves to ``guides/`` to leave the home page to them.
- A link from a guide to ``../README.md`` goes to the home page.
- A link to a page of the published site (``site_url``), as the README has them so that they
  work on the package index's page too, becomes a link to that page of this build: the build
  checks it (a page or an anchor that does not exist fails it), and a local build stays local.
- A code span that names a public object (`` `fencelock.LockClient.from_url` ``, `` `fencelock.
  celery.ExclusiveTask` ``, with or without call arguments) links to its entry in the API
  reference, and the build fails (autorefs, under --strict) when that object does not exist: a
  guide cannot go on naming a function that was renamed. Logger and metric names
  (`` `fencelock.acquire` ``) are left alone: what counts as a public object is a documented
  module (below), a name of ``fencelock.__all__``, or a capitalised name.
- Each nav entry ``reference/MODULE.md`` that has no file becomes the API reference of MODULE,
  generated from its docstrings by mkdocstrings (``::: MODULE``): the nav is the one list of the
  documented modules. The pages of ``fencelock`` and ``fencelock.asyncio`` lead with what a
  user makes first: the client, the lock, the other primitives (``LEAD``), then the errors
  (``LockError``, their base, first), then the rest of ``__all__`` in alphabetical order.
- A page with a Mermaid diagram (`` ```mermaid ``, which the theme draws from ``<pre
  class="mermaid">``) loads mermaid's script from the site itself, not from a CDN as the theme
  would: the site works offline and loads nothing from elsewhere. The script is taken from
  mermaid's npm package, pinned by version and checksum, fetched by ``npm pack`` (npm's cache
  makes later builds offline); without npm the build warns (and so fails under --strict).
"""

from __future__ import annotations

import importlib
import json
import logging
import re
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page
from mkdocs.utils import get_relative_url

import fencelock

ROOT = Path(__file__).resolve().parent.parent
# the repository's own pages, and where they go in the site
ROOT_PAGES = {"README.md": "index.md", "CHANGELOG.md": "changelog.md"}
REFERENCE = "reference/"
# the modules whose reference is in reading order (their names are in alphabetical order in their
# source), and the classes their pages lead with
IN_READING_ORDER = ("fencelock", "fencelock.asyncio")
LEAD = (
    *("LockClient", "Lock", "Semaphore", "ReadWriteLock", "MultiLock"),
    *("Latch", "Barrier", "Election", "Versioned", "OncePer"),
)
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
# `fencelock.a.b` or `fencelock.a.b(args)`, not already the text of a link
NAMED = re.compile(r"(?<!\[)`(fencelock(?:\.\w+)+)(?:\([^`]*\))?`(?!\])")
# the major version the theme's own loader asks for; the checksum is npm's for this version
MERMAID = "mermaid@11.17.2"
MERMAID_INTEGRITY = (
    "sha512-V6K3C8EBdEsPFZXSKMJe6ppQOENxuHARr9GvHX4hh47lAbhMRD9qf4oEK7LoaRQxUL"
    "Ma80/qt5gHO73aCleBBg=="
)
MERMAID_JS = "assets/javascripts/mermaid.min.js"
DIAGRAM = '<pre class="mermaid">'  # what pymdownx.superfences makes of a ```mermaid block
NPM_TIMEOUT = 300  # s: a first download of the package (18 MB)

log = logging.getLogger(f"mkdocs.hooks.{__name__}")


def _into_docs(markdown: str) -> str:
    """A page of the repository's root, with its links into docs/ made relative to docs/."""
    return re.sub(r"\]\(docs/", "](", markdown)


def _nav_pages(nav: Any) -> list[str]:
    """Every page path named in the nav config (lists of strings and {title: ...} dicts)."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    if isinstance(nav, list):
        return [page for item in nav for page in _nav_pages(item)]
    return []


def _documented_modules(config: MkDocsConfig) -> set[str]:
    """The first name after ``fencelock.`` of each module the nav's reference documents."""
    pages = [p.removeprefix(REFERENCE) for p in _nav_pages(config.nav) if p.startswith(REFERENCE)]
    return {p.split(".")[1] for p in pages if p.count(".") > 1}


def _link_names(text: str, modules: set[str]) -> str:
    def link(match: re.Match[str]) -> str:
        path = match.group(1)
        first = path.split(".")[1]
        if first.startswith("_"):  # (the reference leaves out private and dunder names)
            return match.group(0)
        if first in modules or first in fencelock.__all__ or first[0].isupper():
            return f"[{match.group(0)}][{path}]"
        return match.group(0)

    return NAMED.sub(link, text)


def _mermaid_script() -> bytes | None:
    """mermaid's script from its npm package, or None (said in a warning) without npm."""
    with tempfile.TemporaryDirectory() as tmp:
        try:
            packed = subprocess.run(
                ["npm", "pack", "--json", "--prefer-offline", "--pack-destination", tmp, MERMAID],
                cwd=tmp,
                capture_output=True,
                text=True,
                timeout=NPM_TIMEOUT,
                check=True,
            )
        except (OSError, subprocess.SubprocessError) as error:
            detail = getattr(error, "stderr", None) or error
            log.warning(f"the diagrams' script: `npm pack {MERMAID}` failed: {detail}")
            return None
        package = json.loads(packed.stdout)[0]
        if package["integrity"] != MERMAID_INTEGRITY:
            raise ValueError(f"{MERMAID}: checksum {package['integrity']}, not the one pinned")
        with tarfile.open(Path(tmp) / package["filename"]) as tar:
            script = tar.extractfile("package/dist/mermaid.min.js")
            assert script is not None  # (a regular file of the package)
            return script.read()


def _is_exception(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, Exception)


def _reading_order(module: str) -> list[str]:
    """The public names of ``module``: ``LEAD``, the errors, then the rest."""
    namespace = importlib.import_module(module)
    names = [name for name in namespace.__all__ if not name.startswith("_")]
    if gone := set(LEAD) - set(names):
        raise ValueError(f"tools/mkdocs_hooks.py: LEAD names what {module} lacks: {sorted(gone)}")
    exceptions = [n for n in names if _is_exception(getattr(namespace, n))]
    errors = sorted(exceptions, key=lambda name: (name != "LockError", name))
    return [*LEAD, *errors, *sorted(set(names) - set(LEAD) - set(errors))]


def _reference(module: str) -> str:
    """The page of the API reference of ``module``."""
    page = f"# `{module}`\n\n::: {module}\n"
    if module in IN_READING_ORDER:
        page += f"    options:\n      members: [{', '.join(_reading_order(module))}]\n"
    return page


def on_files(files: Files, *, config: MkDocsConfig) -> Files:
    guides = files.get_file_from_path("README.md")
    if guides is not None:
        files.remove(guides)
        files.append(
            File(
                guides.src_uri,
                config.docs_dir,
                config.site_dir,
                config.use_directory_urls,
                dest_uri="guides/index.html" if config.use_directory_urls else "guides.html",
            )
        )
    for source, target in ROOT_PAGES.items():
        text = (ROOT / source).read_text(encoding="utf-8")
        files.append(File.generated(config, target, content=_into_docs(text)))
    for page in _nav_pages(config.nav):
        if page.startswith(REFERENCE) and files.get_file_from_path(page) is None:
            module = page.removeprefix(REFERENCE).removesuffix(".md")
            files.append(File.generated(config, page, content=_reference(module)))
    script = _mermaid_script()
    if script is not None:
        files.append(File.generated(config, MERMAID_JS, content=script))
    return files


def _into_build(markdown: str, page: Page, site_url: str, files: Files) -> str:
    """Links to the pages of the published site made links to the pages of this build."""
    pages = {file.url: file for file in files.documentation_pages()}

    def local(match: re.Match[str]) -> str:
        target = pages.get(match.group(1))
        if target is None:
            log.warning(f"{page.file.src_uri}: {match.group(0)[2:-1]} is no page of the site")
            return match.group(0)
        return f"]({get_relative_url(target.src_uri, page.file.src_uri)}{match.group(2) or ''})"

    return re.sub(rf"\]\({re.escape(site_url)}([^)#\s]*)(#[^)\s]*)?\)", local, markdown)


def on_page_markdown(
    markdown: str, *, page: Page, config: MkDocsConfig, files: Files, **kwargs: Any
) -> str:
    markdown = markdown.replace("](../README.md", "](index.md")
    if config.site_url:
        markdown = _into_build(markdown, page, config.site_url, files)
    modules = _documented_modules(config)
    # outside fenced code blocks only
    parts, end = [], 0
    for block in FENCE.finditer(markdown):
        parts += [_link_names(markdown[end : block.start()], modules), block.group(0)]
        end = block.end()
    return "".join([*parts, _link_names(markdown[end:], modules)])


def on_post_page(output: str, *, page: Page, config: MkDocsConfig) -> str:
    """A page with a diagram loads mermaid's script (3.5 MB) before the theme's loader looks for
    it; the other pages do not load it at all."""
    if DIAGRAM not in output:
        return output
    script = f'<script src="{get_relative_url(MERMAID_JS, page.url)}"></script>'
    return output.replace("</body>", f"{script}\n</body>", 1)
