"""The module map of docs/architecture.md, generated from the code: each package and module
named with the first sentence of its docstring.

`python -m tests.support.modulemap` writes the map into the page; `tests/test_architecture.py` fails
when the page and the code disagree.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "architecture.md"
BEGIN = "<!-- module map: generated from the docstrings by `python -m tests.support.modulemap` -->"
END = "<!-- end of the module map -->"
_SENTENCE = re.compile(r"^(.*?[.!?])(?:\s|$)", re.S)


def first_sentence(path: Path) -> str:
    """The docstring's first sentence, on one line (a module without one says so)."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or "(no docstring)"
    paragraph = " ".join(doc.split("\n\n")[0].split())
    found = _SENTENCE.match(paragraph)
    return found[1] if found else paragraph


def _dotted(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def render() -> str:
    """The map: the bottom modules, then one table per package, modules in name order."""
    root = REPO / "forged"
    lines = [BEGIN, "", "| module | what it owns |", "|---|---|"]
    for path in sorted(root.glob("*.py")):
        lines.append(f"| `{_dotted(path)}` | {first_sentence(path)} |")
    for package in sorted(p for p in root.iterdir() if (p / "__init__.py").is_file()):
        lines += ["", f"**`{_dotted(package)}/`**: {first_sentence(package / '__init__.py')}", ""]
        lines += ["| module | what it owns |", "|---|---|"]
        for path in sorted(package.glob("*.py")):
            if path.name != "__init__.py":
                lines.append(f"| `{_dotted(path)}` | {first_sentence(path)} |")
    return "\n".join([*lines, "", END])


def current(text: str) -> str:
    """The map as the page holds it now."""
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[start:end]


def main() -> int:
    text = PAGE.read_text()
    PAGE.write_text(text.replace(current(text), render()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
