"""MkDocs hooks (mkdocs.yml): the site is built from the files as they are read on GitHub.

- The repository's README.md is the home page and CHANGELOG.md the changelog page, with their
  links into docs/ made relative to docs/ (``docs/leases.md`` -> ``leases.md``); the guides'
  index, docs/README.md, moves to ``guides/`` to leave the home page to them.
- A link from a guide to ``../README.md`` goes to the home page.
- A code span that names a public object (`` `fencelock.LockClient.from_url` ``, `` `fencelock.
  celery.ExclusiveTask` ``, with or without call arguments) links to its entry in the API
  reference, and the build fails (autorefs, under --strict) when that object does not exist: a
  guide cannot go on naming a function that was renamed. Logger and metric names
  (`` `fencelock.acquire` ``) are left alone: what counts as a public object is a documented
  module (below), a name of ``fencelock.__all__``, or a capitalised name.
- Each nav entry ``reference/MODULE.md`` that has no file becomes the API reference of MODULE,
  generated from its docstrings by mkdocstrings (``::: MODULE``): the nav is the one list of the
  documented modules.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

import fencelock

ROOT = Path(__file__).resolve().parent.parent
# the repository's own pages, and where they go in the site
ROOT_PAGES = {"README.md": "index.md", "CHANGELOG.md": "changelog.md"}
REFERENCE = "reference/"
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
# `fencelock.a.b` or `fencelock.a.b(args)`, not already the text of a link
NAMED = re.compile(r"(?<!\[)`(fencelock(?:\.\w+)+)(?:\([^`]*\))?`(?!\])")


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
            files.append(File.generated(config, page, content=f"# `{module}`\n\n::: {module}\n"))
    return files


def on_page_markdown(markdown: str, *, page: Page, config: MkDocsConfig, **kwargs: Any) -> str:
    markdown = markdown.replace("](../README.md", "](index.md")
    modules = _documented_modules(config)
    # outside fenced code blocks only
    parts, end = [], 0
    for block in FENCE.finditer(markdown):
        parts += [_link_names(markdown[end : block.start()], modules), block.group(0)]
        end = block.end()
    return "".join([*parts, _link_names(markdown[end:], modules)])
