"""Build the student edition of the notebooks (standard library only: no torch needed).

Usage: python3 scripts/student_edition.py [SRC_DIR] [DEST_DIR]   (default: notebooks student)

Every notebook in SRC_DIR is written to DEST_DIR with instructor answers removed,
each solution replaced by a ``# YOUR CODE HERE`` stub, the code that needs an
unfinished stub guarded so that "Run All" reaches the last cell (see
scripts/editions.py), checker cells kept and outputs cleared. DEST_DIR is
ignored by git. The build fails (exit 1) if any solution line would survive.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from editions import is_graded, load_solutions, make_edition, solution_text, source, tags  # noqa: E402


def leaked_lines(original: dict, student: dict, solutions: dict[str, str] | None = None) -> list[str]:
    """Solution lines of ``original`` (and of its graded ``solutions``, by cell id) that still
    appear in ``student`` code cells, and instructor answers that still appear anywhere."""
    student_code = "\n".join(source(c) for c in student["cells"])
    leaks = []
    for cell in original["cells"]:
        if is_graded(cell):  # the committed cell is the scaffold; its solution is kept apart
            own = [s for s in solution_text((solutions or {}).get(cell.get("id", ""), "")) if len(s.strip()) > 12]
            outside = "\n".join(source(c) for c in original["cells"] if c is not cell)
            leaks += [s for s in own if s.strip() in student_code and s.strip() not in outside]
        elif "solution" in tags(cell) and cell.get("cell_type") == "code":
            own = [s for s in solution_text(source(cell)) if len(s.strip()) > 12]
            # A line that the scaffold keeps elsewhere in the notebook is not a leak of this solution.
            outside = "\n".join(source(c) for c in original["cells"] if c is not cell and "solution" not in tags(c))
            leaks += [s for s in own if s.strip() in student_code and s.strip() not in outside]
        if "instructor" in tags(cell) and source(cell).strip() and source(cell).strip() in student_code + "\n".join(
            source(c) for c in student["cells"]
        ):
            leaks.append(source(cell).strip()[:60])
    return leaks


def build(src_dir: Path, dest_dir: Path, names: list[str] | None = None) -> list[Path]:
    """Write the student edition of every notebook in ``src_dir`` (or of those ``names``)."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for path in sorted(src_dir.glob("*.ipynb")):
        if names is not None and path.name not in names:
            continue
        original = json.loads(path.read_text(encoding="utf-8"))
        student = make_edition(original, "student")
        leaks = leaked_lines(original, student, load_solutions(path.name))
        if leaks:
            raise SystemExit(f"{path.name}: solution text would survive in the student edition: {leaks[:3]}")
        out = dest_dir / path.name
        out.write_text(json.dumps(student, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        written.append(out)
    return written


def main(argv: list[str]) -> None:
    src = Path(argv[1]) if len(argv) > 1 else Path("notebooks")
    dest = Path(argv[2]) if len(argv) > 2 else Path("student")
    written = build(src, dest)
    print(f"Student edition: {len(written)} notebooks written to {dest}/")


if __name__ == "__main__":
    main(sys.argv)
