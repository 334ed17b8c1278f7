"""docs/django.md's recipe, copied out of the page into a project and run against a real server:
the view through Django's test client, the command through call_command. In a subprocess:
Django's settings are configured once per process."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import redis

from fencelock_tools.servers.embedded import EmbeddedServer

pytest.importorskip("django")

DOC = Path(__file__).resolve().parents[2] / "docs" / "django.md"

URLS = """
from django.urls import path

from . import views

urlpatterns = [path("rebuild/", views.rebuild)]
"""

CHECK = textwrap.dedent(
    """
    import io, sys
    import django
    from django.conf import settings

    url = sys.argv[1]
    settings.configure(
        FENCELOCK_URL=url, ROOT_URLCONF="myproject.urls", INSTALLED_APPS=["myproject"],
        ALLOWED_HOSTS=["testserver"], DATABASES={}, MIDDLEWARE=[],
    )
    django.setup()
    from django.core.management import call_command
    from django.test import Client

    import fencelock

    def get():
        response = Client().get("/rebuild/")
        print(response.status_code, response.content.decode())

    get()
    with fencelock.LockClient.from_url(url) as other, other.lock("rebuild-index", ttl=10):
        get()  # another host is rebuilding
    for _ in range(2):
        out = io.StringIO()
        call_command("nightly_report", stdout=out)
        print(out.getvalue().strip())
    """
)


def _project(root: Path) -> None:
    """The files of the recipe: each ```python block of the page that starts with
    ``# myproject/<path>``."""
    blocks = re.findall(r"```python\n# (myproject/\S+)\n(.*?)```", DOC.read_text(), re.S)
    assert {path for path, _ in blocks} == {
        "myproject/locks.py",
        "myproject/views.py",
        "myproject/management/commands/nightly_report.py",
    }
    for path, code in [*blocks, ("myproject/urls.py", URLS)]:
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(code)
    for package in ("myproject", "myproject/management", "myproject/management/commands"):
        (root / package / "__init__.py").touch()


def test_the_django_recipe_runs(server: EmbeddedServer, raw: redis.Redis, tmp_path: Path) -> None:
    _project(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", CHECK, server.url],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "200 rebuilt",
        "409 a rebuild is already running",
        "done",
        "skipped: not due or running",
    ]
    assert raw.get("index:built-by") == "/rebuild/"
    assert raw.get("fencelock:{nightly-report}:once_per") is not None
