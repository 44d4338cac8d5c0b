"""README.md is the front door and docs/ the reference: every relative link resolves, every
command they show is one ``mhab`` accepts, the README stays short, and the table of columns
is the one ``bench.records.columns`` defines."""

import re
from pathlib import Path

import pytest

from bench.cli import COMMANDS, check_command
from bench.records.columns import markdown
from tests.conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# the catalogue shows refused commands on purpose (tests/test_bad_input.py runs each)
SHOWN_TO_WORK = [p for p in PAGES if p.name != "errors.md"]
# DIR, OVERRIDES, NAME, path/to/folder: a template to fill in, not a command to run as it is
PLACEHOLDER = re.compile(r"(?<![$\w])[A-Z]{2,}(?![\w=])|path/to/")


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", t)]


def shown_commands(text: str) -> tuple[list[list[str]], list[str]]:
    """The ``mhab`` command lines of the page's shell blocks (split as a shell would, comments
    dropped; templates with placeholders left out), and the commands its inline code names."""
    import shlex

    lines, in_shell = [], False
    for line in re.sub(r"\\\n", " ", text).split("\n"):  # a continued line is one command
        if line.startswith("```"):
            in_shell = line.strip() in ("```bash", "```sh")
            continue
        words = shlex.split(line, comments=True) if in_shell and not PLACEHOLDER.search(line) else []
        while words and re.match(r"^[A-Z_]+=", words[0]):  # VAR=value before the command
            words = words[1:]
        if words and words[0] in ("mhab", ".venv/bin/mhab"):
            lines.append(words[1:])
    inline = re.findall(r"`(?:\.venv/bin/)?mhab ([a-z-]+)", text)
    return lines, inline


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    broken = [link for link in _links(page) if not (page.parent / link.split("#")[0]).exists()]
    assert not broken, f"{page.name}: links to missing files: {broken}"


def test_every_doc_page_is_linked_from_the_readme():
    linked = {(ROOT / link).resolve() for link in _links(ROOT / "README.md")}
    assert [p.name for p in PAGES[1:] if p.resolve() not in linked] == []


@pytest.mark.slow
@pytest.mark.parametrize("page", SHOWN_TO_WORK, ids=lambda p: p.name)
def test_every_command_shown_is_one_mhab_accepts(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # results dirs the checks create land here
    lines, inline = shown_commands(page.read_text())
    assert all(name in COMMANDS or name == "--help" for name in inline), inline
    for argv in lines:
        if not argv or argv[0].startswith("-"):
            continue
        try:
            check_command(argv)
        except SystemExit as e:  # argparse refused it
            pytest.fail(f"{page.name}: 'mhab {' '.join(argv)}' is refused (exit {e.code})")


def test_the_command_check_refuses_what_mhab_refuses():
    from bench.errors import BenchError

    for argv in (["train"], ["run", "model=transformer"], ["speed", "attention.nokey=1"]):
        with pytest.raises(BenchError):
            check_command(argv)
    with pytest.raises(SystemExit):
        check_command(["estimate", "--jobz", "2"])


def test_shell_blocks_are_read_as_a_shell_would():
    lines, inline = shown_commands("```bash\nPYTHONPATH=x mhab run -m a=1 \\\n# no\nmhab table r  # c\n```\n"
                                   "and `mhab report DIR`")
    assert lines == [["run", "-m", "a=1"], ["table", "r"]] and inline == ["report"]


def test_the_readme_is_a_front_door():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def test_the_docs_table_of_columns_is_the_one_the_code_defines():
    text = (ROOT / "docs" / "results.md").read_text()
    block = re.search(r"<!-- columns:[^>]*-->\n(.*?)\n<!-- /columns -->", text, flags=re.S)
    assert block and block.group(1) == markdown(), (
        "docs/results.md's table of columns is stale: replace it with `mhab table --columns`")
