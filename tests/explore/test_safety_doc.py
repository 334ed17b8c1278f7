"""docs/safety.md has three writers: the chaos run rewrites the page, the explorer its own section
(``python -m tests.sim.explore --write-docs``), and so does the Cluster's resharding run
(``python -m bench.reshard --write-docs``). None may drop another's."""

from __future__ import annotations

from pathlib import Path

from bench.chaos.safety_doc import RESHARD, SIMULATION, TAIL, with_simulation

DOCS = Path(__file__).resolve().parents[2] / "docs" / "safety.md"


def test_the_chaos_page_keeps_the_simulations_section_before_the_scenarios() -> None:
    begin, end = SIMULATION
    current = f"# old\n\n{begin}\n## Every schedule\n\nfigures\n{end}\n\n## Scenarios\nold\n"
    rendered = "# new\n\n## More numbers\n\n## Scenarios\nnew\n"
    page = with_simulation(rendered, current)
    assert page == (
        f"# new\n\n## More numbers\n\n{begin}\n## Every schedule\n\nfigures\n{end}\n\n"
        "## Scenarios\nnew\n"
    )
    assert with_simulation(rendered, "# a page without it\n") == rendered


def test_the_chaos_page_keeps_the_resharding_section_too() -> None:
    (begin, end), (rbegin, rend) = SIMULATION, RESHARD
    current = f"# old\n\n{begin}\nsim\n{end}\n\n{rbegin}\nmoves\n{rend}\n\n## Scenarios\nold\n"
    page = with_simulation("# new\n\n## Scenarios\nnew\n", current)
    assert page == (
        f"# new\n\n{begin}\nsim\n{end}\n\n{rbegin}\nmoves\n{rend}\n\n## Scenarios\nnew\n"
    )


def test_the_chaos_page_keeps_its_hand_written_tail() -> None:
    # the fencing tokens' argument and the findings are edited with the code: a run that wrote
    # its own copy of them put back text some changes later (seen on this page, 2026-11-29)
    current = f"# old\n\n## Scenarios\nold\n\n{TAIL}\nedited with the code\n\n## Findings\nf\n"
    page = with_simulation("# new\n\n## Scenarios\nnew\n", current)
    assert page == f"# new\n\n## Scenarios\nnew\n\n{TAIL}\nedited with the code\n\n## Findings\nf\n"


def test_the_page_has_the_simulations_section() -> None:
    text = DOCS.read_text(encoding="utf-8")
    begin, end = SIMULATION
    section = text.split(begin)[1].split(end)[0]
    assert "## Every schedule explored" in section
    assert "| configuration |" in section and "| fix undone" in section
    assert text.index(end) < text.index("## Scenarios")
