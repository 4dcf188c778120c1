"""Every walkthrough of docs/ works as written: its marked blocks run, against the emulator.

See ``tests/docs/_walkthrough.py`` for the markers. A page whose commands no longer work
is a failing test, so the docs cannot rot.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs._walkthrough import ROOT, Walkthrough, runnable, unmarked, walkthrough_pages

PAGES = walkthrough_pages()


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_command_and_config_block_says_whether_it_runs(page: Path) -> None:
    assert unmarked(page) == []


@pytest.mark.parametrize(
    "page", [page for page in PAGES if runnable(page)], ids=lambda p: str(p.relative_to(ROOT))
)
def test_the_walkthrough_runs_as_written(page: Path, tmp_path: Path) -> None:
    Walkthrough(page, tmp_path).run()
