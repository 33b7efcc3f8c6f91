"""Capability: the docs cannot drift from the code.

README.md and docs/*.md may only name repository paths, tests, `ralctl`/`ral-trace`
subcommands, `python -m torch_fl...` modules and link targets that exist, and every
```python block in them runs (in a fresh interpreter, against CPU where it compares).

Two markers, each an HTML comment on the lines just before a ```python fence:
  <!-- docs-test: skip (why) -->      the block is not run; pytest reports the reason
  <!-- docs-test: setup               code run first, in the same interpreter, for a
  import torch ...                     fragment that uses names the prose introduced
  -->
"""

from __future__ import annotations

import ast
import fnmatch
import importlib.util
import os
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import click
import pytest

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
GENERATED = {REPO / "docs" / "supported_ops.md"}  # checked by test_supported_ops_doc_is_current

# A repository path: a top-level folder, then a name; not part of a longer path
# (`/opt/torch_fl/plugins`, `$XDG_CACHE_HOME/torch_fl/opencl`).
PATH_RE = re.compile(
    r"(?<![\w./$~{-])((?:torch_fl|tests|benchmarks|examples|docs|plugins|manifests|scripts|\.ci)/[\w.*/-]*[\w*/])"
)
NODE_RE = re.compile(r"(tests/[\w/]+\.py)::([\w*]+)(?:::(\w+))?")
# Inside code: a test file or a test function named alone (`test_views.py`, `test_matmul_*`).
BARE_TEST_RE = re.compile(r"^(test_[\w*]+?)(\.py)?$")
LINK_RE = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN_RE = re.compile(r"(`+)(.+?)\1", re.S)
FENCE_RE = re.compile(r"^```([\w-]*)\n(.*?)^```", re.S | re.M)
CLI_RE = re.compile(r"(?<![\w-])(ralctl|ral-trace)[ \t]+([a-z][\w-]*)(?:[ \t]+([a-z][\w-]*))?")
MODULE_RE = re.compile(r"python3?[ \t]+-m[ \t]+(torch_fl[\w.]*)")
# Example names in a vendor's walk-through: a path through one of them is not checked.
PLACEHOLDERS = {"acme", "acme.json", "myvendor", "your_vendor"}
MARKER_RE = re.compile(r"<!--\s*docs-test:\s*(skip|setup)\b(.*?)-->\s*\Z", re.S)


def _rel(doc: Path) -> str:
    return str(doc.relative_to(REPO))


def _code(text: str) -> str:
    """The text inside fenced blocks and inline code spans: where commands and names appear."""
    fences = [m.group(2) for m in FENCE_RE.finditer(text)]
    rest = FENCE_RE.sub("", text)
    return "\n".join(fences + [m.group(2) for m in CODE_SPAN_RE.finditer(rest)])


@cache
def _functions(path: Path) -> frozenset[str]:
    """Names of the functions (module level and in classes) a test file defines."""
    tree = ast.parse(path.read_text())
    return frozenset(n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))


@cache
def _all_test_functions() -> frozenset[str]:
    return frozenset(name for p in (REPO / "tests").rglob("test_*.py") for name in _functions(p))


def _exists(rel: str) -> bool:
    rel = rel.rstrip("/")
    return any(REPO.glob(rel)) if "*" in rel else (REPO / rel).exists()


def _problems_in_paths(doc: Path, text: str) -> list[str]:
    out = []
    for m in PATH_RE.finditer(text):
        if PLACEHOLDERS & set(m.group(1).split("/")):
            continue
        if not _exists(m.group(1)):
            out.append(f"{_rel(doc)}: names {m.group(1)!r}, which does not exist")
    for m in NODE_RE.finditer(text):
        path, name, method = REPO / m.group(1), m.group(2), m.group(3)
        if not path.exists():
            continue  # reported above
        names = _functions(path)
        for want in filter(None, (name if not method else None, method)):
            if not fnmatch.filter(names, want):
                out.append(f"{_rel(doc)}: names test {m.group(0)!r}, but {m.group(1)} has no {want}")
    for token in re.findall(r"[\w*.]+", _code(text)):
        m = BARE_TEST_RE.match(token)
        if m is None:
            continue
        if m.group(2):
            if not any((REPO / "tests").rglob(token)):
                out.append(f"{_rel(doc)}: names test file {token!r}, not in tests/")
        elif not fnmatch.filter(_all_test_functions(), m.group(1)) and not any((REPO / "tests").rglob(token + ".py")):
            out.append(f"{_rel(doc)}: names test {token!r}, defined in no tests/test_*.py")
    return out


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(doc: Path) -> set[str]:
    text = FENCE_RE.sub("", doc.read_text())
    return {_slug(h) for h in re.findall(r"^#{1,6}\s+(.*)$", text, re.M)}


def _problems_in_links(doc: Path, text: str) -> list[str]:
    out = []
    for target in LINK_RE.findall(FENCE_RE.sub("", text)):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        if not dest.exists():
            out.append(f"{_rel(doc)}: links to {target!r}, which does not exist")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            out.append(f"{_rel(doc)}: links to {target!r}, but {dest.name} has no heading with that anchor")
    return out


def _cli_commands() -> dict[str, click.Group]:
    from torch_fl.tools import ralctl, raltrace

    return {"ralctl": ralctl.cli, "ral-trace": raltrace.cli}


def _problems_in_commands(doc: Path, text: str) -> list[str]:
    out, clis = [], _cli_commands()
    code = _code(text)
    for tool, sub, subsub in CLI_RE.findall(code):
        cmd = clis[tool].commands.get(sub)
        if cmd is None:
            out.append(
                f"{_rel(doc)}: `{tool} {sub}`: {tool} has no command {sub!r} (it has {sorted(clis[tool].commands)})"
            )
        elif isinstance(cmd, click.Group) and subsub and subsub not in cmd.commands:
            out.append(f"{_rel(doc)}: `{tool} {sub} {subsub}`: no such subcommand")
    for module in MODULE_RE.findall(code):
        if importlib.util.find_spec(module) is None:
            out.append(f"{_rel(doc)}: `python -m {module}`: no such module")
    return out


@pytest.mark.parametrize("doc", DOCS, ids=_rel)
def test_doc_names_only_things_that_exist(doc):
    text = doc.read_text()
    problems = _problems_in_links(doc, text) + _problems_in_commands(doc, text)
    if doc not in GENERATED:
        problems += _problems_in_paths(doc, text)
    assert not problems, "\n".join(problems)


def test_the_checks_catch_what_does_not_exist(tmp_path):
    # Each check, given a name that does not exist, reports it (so a passing doc means something).
    doc = REPO / "docs" / "index.md"
    bad = (
        "see torch_fl/no_such_module.py and `tests/test_docs.py::test_no_such_test` and "
        "`test_no_such_function` and `test_no_such_file.py`; [x](no_such_page.md), "
        "[y](porting.md#no-such-heading); `ralctl no-such-command`, `ralctl manifest nothing`, "
        "`python -m torch_fl.no_such_tool`"
    )
    found = _problems_in_paths(doc, bad) + _problems_in_links(doc, bad) + _problems_in_commands(doc, bad)
    for needle in (
        "torch_fl/no_such_module.py",
        "test_no_such_test",
        "test_no_such_function",
        "test_no_such_file.py",
        "no_such_page.md",
        "no-such-heading",
        "no-such-command",
        "manifest nothing",
        "torch_fl.no_such_tool",
    ):
        assert any(needle in p for p in found), (needle, found)
    good = (
        "torch_fl/observe/coverage.py, `tests/test_docs.py::test_the_checks_catch_what_does_not_exist`, "
        "`test_doc_names_only_things_that_exist`, [p](porting.md#torchcompile), `ralctl manifest validate`, "
        "`ral-trace report`, `python -m torch_fl.tools.sweep`, `/opt/torch_fl/plugins`"
    )
    assert _problems_in_paths(doc, good) + _problems_in_links(doc, good) + _problems_in_commands(doc, good) == []


def _examples() -> list:
    """(doc, line, code, setup, skip reason) for every ```python block of the docs."""
    out = []
    for doc in DOCS:
        text = doc.read_text()
        for m in FENCE_RE.finditer(text):
            if m.group(1) != "python":
                continue
            line = text.count("\n", 0, m.start()) + 1
            before = text[: m.start()]
            start = before.rfind("<!--")
            marker = MARKER_RE.match(before[start:]) if start >= 0 else None
            setup, skip = "", None
            if marker and marker.group(1) == "skip":
                skip = marker.group(2).strip().strip("()").strip()
                assert skip, f"{_rel(doc)}:{line}: a docs-test skip marker needs a reason in parentheses"
            elif marker:
                setup = marker.group(2).strip("\n")
            out.append(pytest.param(doc, line, m.group(2), setup, skip, id=f"{_rel(doc)}:{line}"))
    return out


@pytest.mark.parametrize("doc, line, code, setup, skip", _examples())
def test_doc_example_runs(doc, line, code, setup, skip, tmp_path):
    if skip:
        pytest.skip(f"{_rel(doc)}:{line}: {skip}")
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    script = tmp_path / "example.py"
    script.write_text(setup + "\n" + code)
    res = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0, f"{_rel(doc)}:{line} failed:\n{code}\n{res.stdout[-2000:]}\n{res.stderr[-4000:]}"
