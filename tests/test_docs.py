"""The docs cite only files that exist, under the names they have; the README stays short and its test
command is the one CI runs.

Checked in README.md, CONTRIBUTING.md, results/NOTES.md and every run folder's README:
* backticked paths under results/, training_results/ or notebooks/ (from the repository root), and every
  relative markdown link target (from the document's folder), exist; a `<placeholder>` segment
  (`results/<device>/`) is skipped, a `*` is matched as a glob;
* a backticked bare artifact name (`ops.csv`) exists beside the document or somewhere under those roots.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROOTS = ("results/", "training_results/", "notebooks/")
DOCS = ["README.md", "CONTRIBUTING.md", "results/NOTES.md"]
RUN_FOLDERS = sorted(p for p in ROOT.glob("results/*/runs/*") if p.is_dir())
RUN_DOCS = sorted(str(p.relative_to(ROOT)) for p in ROOT.glob("results/*/runs/**/README.md"))
ARTIFACT = re.compile(r"^[\w.\-]+\.(?:csv|json|png|txt|pdf|ipynb|md)$")
MAX_README_LINES = 150


def _prose(text: str) -> str:
    """The text outside fenced code blocks (commands there use placeholders and scratch paths)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _code_tokens(text: str) -> list[str]:
    tokens = []
    for span in re.findall(r"`([^`\n]+)`", _prose(text)):
        tokens += [t.rstrip(",;:") for t in span.split()]
    return tokens


def _links(text: str) -> list[str]:
    targets = re.findall(r"\]\(([^)\s]+)\)", re.sub(r"`[^`\n]+`", "", _prose(text)))
    return [t.split("#")[0] for t in targets if not re.match(r"^(?:[a-z]+:|#)", t)]


def _exists(base: Path, path: str) -> bool | None:
    """Whether ``path`` (relative to ``base``) exists; None when it holds a placeholder."""
    if "<" in path:
        return None
    if "*" in path:
        return any(base.glob(path.rstrip("/")))
    return (base / path).exists()


def _artifact_names() -> set[str]:
    names = set()
    for top in ROOTS:
        names.update(p.name for p in (ROOT / top).rglob("*") if p.is_file())
    return names


def missing_paths(doc: str, artifact_names: set[str] | None = None) -> list[str]:
    """Every path ``doc`` names that does not exist under that name."""
    path = ROOT / doc
    text = path.read_text(encoding="utf-8")
    missing = []
    for token in _code_tokens(text):
        if token.startswith(ROOTS):
            if _exists(ROOT, token) is False:
                missing.append(token)
        elif ARTIFACT.match(token) and not (path.parent / token).exists():
            if artifact_names is None:
                artifact_names = _artifact_names()
            if token not in artifact_names:
                missing.append(token)
    for target in _links(text):
        if target and _exists(path.parent, target) is False:
            missing.append(f"link {target}")
    return missing


@pytest.mark.parametrize("doc", DOCS + RUN_DOCS)
def test_named_paths_exist(doc):
    assert (ROOT / doc).exists(), f"{doc} is missing"
    missing = missing_paths(doc)
    assert not missing, f"{doc} names files that do not exist: {missing}"


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines (at most {MAX_README_LINES})"


def test_readme_test_command_is_what_ci_runs():
    ci = [line.strip() for line in (ROOT / ".ci/run").read_text().splitlines()
          if "pytest" in line and not line.lstrip().startswith("#")]
    assert len(ci) == 1, f".ci/run should run exactly one test command, found {ci}"
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", (ROOT / "README.md").read_text(encoding="utf-8"), flags=re.S | re.M)
    readme_lines = {line.strip() for block in blocks for line in block.splitlines()}
    assert ci[0] in readme_lines, f"the README's code blocks do not contain .ci/run's command: {ci[0]}"


@pytest.mark.parametrize("folder", RUN_FOLDERS, ids=[p.name for p in RUN_FOLDERS])
def test_run_folder_has_its_readme(folder):
    readme = folder / "README.md"
    assert readme.exists(), f"{folder.relative_to(ROOT)} has no README.md"
    heads = [line.split(":", 1)[0] for line in readme.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert heads[:3] == ["Command", "Commit", "Showed"], f"{readme.relative_to(ROOT)}: expected Command / Commit / Showed"
    index = (folder.parent / "README.md").read_text(encoding="utf-8")
    assert f"]({folder.name}/README.md)" in index, f"{folder.parent.relative_to(ROOT)}/README.md does not list {folder.name}"
