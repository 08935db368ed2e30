"""Every code path the docs name exists: a file of the repository (``grounded_planner/ros/names.py``,
``test/test_layers.py``, ``launch/real.launch.py``, ``config/real.yaml``), a module or a name in a module
(``grounded_planner.vlm.factory.make_planner``), and every relative link between the pages. A page that names a
moved function or a deleted file fails here, with the page and the line."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
# a repository path with a suffix, in backticks or in a link: grounded_planner/..., test/..., launch/... and the like
FILE = re.compile(
    r"(?<![\w./-])((?:grounded_planner|grounded_planner_interfaces|test|launch|config|scripts|benchmarks|"
    r"calibration|docs)/[\w./-]*\w\.(?:py|md|yaml|yml|msg|srv|action|xml|json|rviz|sh|txt))\b"
)
# a dotted name under the package: a module, or a module and the names inside it
DOTTED = re.compile(r"`(grounded_planner(?:\.\w+)+)")
# paths the docs name that are not in this repository, each with the reason
NOT_OURS = {
    "calibration/my_cell.yaml": "the user's own calibration file, written by `calibrate`",
    "config/PROFILE.yaml": "a placeholder for a profile's name",
    "calibration/extrinsics.yaml": "written beside a bag by `grounded-planner demo`",
    "config/fr3_ros_controllers.yaml": "a file of franka_fr3_moveit_config, not of this package",
}
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _mentions(pattern: re.Pattern) -> list[tuple[str, int, str]]:
    out = []
    for page in PAGES:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            out += [(f"{page.relative_to(REPO)}:{number}", number, m) for m in pattern.findall(line)]
    return out


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def test_every_file_the_docs_name_exists():
    missing = [
        f"{where}: {path}"
        for where, _, path in _mentions(FILE)
        if path not in NOT_OURS and "*" not in path and "<" not in path and not (REPO / path).exists()
    ]
    assert not missing, "the docs name files that do not exist:\n" + "\n".join(missing)


def test_every_module_and_name_the_docs_name_imports():
    pytest.importorskip("rclpy")  # the ros layer's modules import rclpy at their top
    missing = [f"{where}: {name}" for where, _, name in _mentions(DOTTED) if not _resolves(name)]
    assert not missing, "the docs name modules or names that do not exist:\n" + "\n".join(missing)


def test_every_relative_link_between_pages_resolves():
    broken = []
    for page in PAGES:
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
            for target in LINK.findall(line):
                if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
                    continue
                if not (page.parent / target).exists():
                    broken.append(f"{page.relative_to(REPO)}:{number}: {target}")
    assert not broken, "links to pages or files that do not exist:\n" + "\n".join(broken)


def test_the_index_lists_every_page_and_the_readme_links_it():
    index = (REPO / "docs" / "index.md").read_text(encoding="utf-8")
    linked = set(LINK.findall(index))
    unlisted = sorted(
        page.name
        for page in (REPO / "docs").glob("*.md")
        if page.name not in linked and page.name not in ("index.md", "INTERFACES.md")
    )
    assert not unlisted, (
        f"docs/index.md does not list {unlisted}: add each under tutorials, how-to guides, reference or explanation"
    )
    assert "(docs/index.md)" in (REPO / "README.md").read_text(encoding="utf-8")


def test_every_class_the_glossary_names_exists():
    """The glossary of docs/architecture.md gives each concept its one name (issue 29.4): every class or message it
    names in backticks is one the package or grounded_planner_interfaces defines, so a rename that leaves the
    glossary behind fails here."""
    import ast

    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    glossary = text.split("## Glossary", 1)[1].split("\n## ", 1)[0]
    classes = {
        node.name
        for path in (REPO / "grounded_planner").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.ClassDef)
    }
    classes |= {
        p.stem for p in (REPO / "grounded_planner_interfaces").glob("*/*") if p.suffix in (".msg", ".srv", ".action")
    }
    named = set(re.findall(r"`([A-Z][A-Za-z0-9]*[a-z][A-Za-z0-9]*)`", glossary))
    assert len(named) >= 10, f"the glossary names too few classes to check: {sorted(named)}"
    missing = sorted(named - classes)
    assert not missing, f"docs/architecture.md's glossary names classes that do not exist: {missing}"
