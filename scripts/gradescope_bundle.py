"""Gradescope's autograder for the book's assignments: the same checks as ``make grade``.

``python scripts/gradescope_bundle.py build [--out gradescope_autograder.zip] [--notebooks ch03_exercises ...]
[--course course.toml]`` writes the zip to upload as a Gradescope programming assignment's
autograder ("Zip file upload"). It holds:

- ``setup.sh``: installs Python, bubblewrap and the package (torch for CPU, nbclient, ipykernel);
- ``run_autograder``: runs ``gradescope_bundle.py run``;
- beside them, at the zip's root (Gradescope extracts the whole zip into ``/autograder/source``):
  the package with its checkers (``pyproject.toml``, ``src/attention_book``), the grader
  (``scripts/grade.py`` and its helpers), the reference notebooks of the graded assignments, the
  course file (with its extra cases, each copied to ``course/extra_cases/<assignment>.py`` and the
  course file's path rewritten to it; without its roster and times file, since Gradescope knows its
  students and when each handed in) and a grading secret made for this bundle: each build makes a new
  one, so new hidden draws for every student (rebuild after the due date, upload, and "Regrade all
  submissions": the grade that counts is drawn when nobody can resubmit, so what a student learnt by
  resubmitting, a run's time included, is worth nothing).

``python scripts/gradescope_bundle.py run`` (inside Gradescope's container) grades each notebook in
``/autograder/submission`` exactly as ``make grade`` does, one student at a time (the student's seed
derives from the bundle's secret, the assignment and the student's Gradescope user id), and writes
``/autograder/results/results.json``. ``AUTOGRADER_ROOT`` replaces ``/autograder`` (for tests).
The hidden cases' tests and the points show after the due date unless the course file's
``[gradescope] scores`` says otherwise (``after_published``, or ``visible``: at once); until then
the student sees only that the notebook was received and run and how many cases it draws
(grade.gradescope_json): a resubmission draws new cases, so a score shown at once could be re-rolled.

Each notebook runs in bubblewrap's sandbox where the container lets it make namespaces; where it
does not, as the unprivileged user ``ab-student`` that ``setup.sh`` creates (``GRADE_SANDBOX_USER``
names another), which can neither write the package, the checkers and the results nor read the
bundle's secret; the judge has loaded the checkers before the notebook starts. Where neither is
possible the submission is not graded: results.json says so and the run exits with status 1.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import secrets
import shutil
import stat
import sys
import tempfile
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10 (Ubuntu 22.04, Gradescope's image): setup.sh installs tomli
    import tomli as tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TORCH = "2.13.0"  # the version the grader is tested with; a course file's [gradescope] torch replaces it
SCRIPTS = ("grade.py", "course.py", "lms_export.py", "gradescope_bundle.py", "editions.py")

SETUP = """#!/usr/bin/env bash
# Gradescope runs this once, when the autograder image is built.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends python3 python3-venv python3-pip bubblewrap
python3 -m venv /autograder/venv
/autograder/venv/bin/pip install --upgrade pip
/autograder/venv/bin/pip install "torch=={torch}" --index-url https://download.pytorch.org/whl/cpu
/autograder/venv/bin/pip install "nbclient>=0.8" "nbformat>=5.9" "ipykernel>=6.29,<7" "tomli>=2; python_version < '3.11'"
/autograder/venv/bin/pip install /autograder/source
# where bubblewrap cannot make its namespaces in this container, each notebook runs as this user, which
# cannot write the installed package, the checkers or the results, nor read /autograder/source; it runs the
# venv's Python, so /autograder and the venv are passable and readable to it
id -u ab-student >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin ab-student
chmod go+rx /autograder
chmod -R go+rX /autograder/venv
chmod -R go-rwx /autograder/source   # the answers and the secret: root only
# the installed package holds the checkers' answers too: root only (the sandbox mounts a student copy over it;
# a notebook run as ab-student imports the student copy the grader puts first on its path)
chmod -R go-rwx "$(/autograder/venv/bin/python -c 'import attention_book, os; print(os.path.dirname(attention_book.__file__))')"
"""

RUN = """#!/usr/bin/env bash
# Gradescope runs this for every submission.
cd /autograder/source
exec /autograder/venv/bin/python scripts/gradescope_bundle.py run
"""


def build(out: Path, notebooks: list[str], course_file: Path | None) -> Path:
    """Write the autograder zip to ``out``; returns ``out``."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from grade import ignore_in_git, private_dirs, reference_assignments, write_atomic

    refs = reference_assignments(ROOT / "notebooks")
    chosen = [n if n.endswith(".ipynb") else n + ".ipynb" for n in notebooks] or sorted(refs)
    unknown = [n for n in chosen if n not in refs]
    if unknown:
        raise SystemExit(f"gradescope_bundle: {unknown} are not notebooks with an assignment; known: {sorted(refs)}")
    course = None
    if course_file is not None:  # a wrong [gradescope] scores (or any other key) stops here, not on Gradescope
        from course import CourseError, load_course

        try:
            course = load_course(course_file)  # the one parse of the course file
        except CourseError as err:
            raise SystemExit(f"gradescope_bundle: {err}") from None
    torch = (course.torch if course is not None else "") or TORCH
    if not all(part.isalnum() or part in ".+" for part in torch):
        raise SystemExit(f"gradescope_bundle: [gradescope] torch = {torch!r} is not a version")
    files: dict[str, bytes | Path] = {"setup.sh": SETUP.replace("{torch}", torch).encode(),
                                      "run_autograder": RUN.encode()}
    for name in ("pyproject.toml", "setup.py", "README.md"):
        if (ROOT / name).is_file():
            files[f"{name}"] = ROOT / name
    for path in sorted((ROOT / "src" / "attention_book").rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            files[f"{path.relative_to(ROOT)}"] = path
    for name in SCRIPTS:
        files[f"scripts/{name}"] = ROOT / "scripts" / name
    files["book/_ext/kernel_poll.py"] = ROOT / "book" / "_ext" / "kernel_poll.py"
    if (ROOT / "book" / "_claims_report.json").is_file():
        files["book/_claims_report.json"] = ROOT / "book" / "_claims_report.json"
    for name in chosen:
        files[f"notebooks/{name}"] = ROOT / "notebooks" / name
    settings = {"secret": secrets.token_hex(32), "course": None}
    if course_file is not None:
        # Gradescope knows its students and when each handed in (submission_metadata.json): the
        # roster and the times file (names and logins of the whole class) stay out of the bundle
        # and only the assignments of the bundle's notebooks (a ch03 bundle carried [assignments.bleu])
        keep = {n for name in chosen for n in refs[name]}
        # each extra-cases file under course/ by its assignment's name, the course file's path rewritten to it:
        # a path as the instructor wrote it ("../elsewhere/x.py", or absolute) made a zip entry outside
        # course/ ("course/../elsewhere/extra.py": unzip puts it elsewhere, every submission a GRADER ERROR)
        extras = {n: f"extra_cases/{re.sub(r'[^A-Za-z0-9_]', '_', n)}.py"
                  for n, a in course.assignments.items() if n in keep and a.extra_cases}
        if len(set(extras.values())) != len(extras):
            raise SystemExit(f"gradescope_bundle: two assignments' extra cases would share a name: {sorted(extras)}")
        files["course/course.toml"] = _without_roster_and_times(course_file.read_text(encoding="utf-8"), keep,
                                                                set(course.assignments), extras)
        for n, inside in extras.items():
            files[f"course/{inside}"] = Path(course.assignments[n].extra_cases)  # load_course made it absolute
        settings["course"] = "course/course.toml"
    files["gradescope.json"] = json.dumps(settings).encode()
    if settings["course"]:
        check_bundled_course(files)
    if not out.parent.exists():  # the folders it makes private, as the grades folder (they hold the secret)
        private_dirs(out.parent, Path(out.parent.anchor))  # every folder it makes, up to the root
        ignore_in_git(out.parent)
    # the zip holds the secret and the extra cases: the instructor's alone (write_atomic: mode 0600 from the
    # start, renamed over ``out``)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as z:
        for name, content in sorted(files.items()):
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = ((0o755 if name in ("setup.sh", "run_autograder") else 0o644) | stat.S_IFREG) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, content if isinstance(content, bytes) else content.read_bytes())
    write_atomic(out, buffer.getvalue())
    return out


CHECK = """import sys
sys.path[:0] = [sys.argv[1] + "/src", sys.argv[1] + "/scripts"]
from course import load_course
from attention_book.assignments.grading import grading_cases
course = load_course(sys.argv[1] + "/course/course.toml")
for name, spec in course.assignments.items():
    if spec.extra_cases:
        grading_cases(name, 0, spec.extra_cases)
"""


def check_bundled_course(files: dict[str, bytes | Path]) -> None:
    """Load the bundle's course file and its extra cases as ``run`` will on Gradescope: from the zip's
    layout, in a fresh Python in a temporary folder. An extra-cases file that imports a sibling module of
    the instructor's (left behind) made every submission a grader error, its score 0.0; it stops here."""
    import subprocess

    with tempfile.TemporaryDirectory(prefix="gradescope-check-") as tmp:
        for name, content in files.items():
            target = Path(tmp, name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content if isinstance(content, bytes) else content.read_bytes())
        done = subprocess.run([sys.executable, "-I", "-c", CHECK, tmp], cwd=tmp, capture_output=True, text=True,
                              env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    if done.returncode:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        raise SystemExit("gradescope_bundle: the bundled course does not load as Gradescope will run it "
                         f"(only the extra-cases file itself is bundled, no module beside it): "
                         f"{lines[-1] if lines else 'exit status ' + str(done.returncode)}")


def _without_roster_and_times(text: str, keep: set[str] | None = None, declared: set[str] | None = None,
                              extras: dict[str, str] | None = None) -> bytes:
    """The course file without its ``[roster]`` table, without ``[late] times``/``source`` and, given
    ``keep``, without the ``[assignments.<key>]`` tables of other assignments. ``declared``: the
    assignments the whole file has (load_course's; None: read from ``text``). ``extras``: per assignment,
    the path its ``extra_cases`` line is rewritten to (relative to the course file, in the bundle)."""
    out, table = [], ""
    extras = extras or {}
    for line in text.splitlines():
        head = line.strip()
        if head.startswith("[") and not head.startswith("[["):
            table = head.split("#", 1)[0].strip()
        key = head.split("=", 1)[0].strip()
        assignment = table[len("[assignments."):-1].strip().strip("\"'") if table.startswith("[assignments.") else ""
        other = keep is not None and table.startswith("[assignments.") and assignment not in keep
        # [overrides]: Gradescope's own extensions and grade changes apply there (its file names the class)
        if table in ("[roster]", "[overrides]") or (table == "[late]" and key in ("times", "source")) or other:
            continue
        if key == "extra_cases" and assignment in extras:
            line = f'extra_cases = "{extras[assignment]}"'
        out.append(line)
    result = "\n".join(out) + "\n"
    parsed = tomllib.loads(result)
    if "roster" in parsed or "overrides" in parsed or {"times", "source"} & set(parsed.get("late", {})):
        raise SystemExit("gradescope_bundle: could not take the roster out of the course file")
    if declared is None and keep is not None:
        declared = set(tomllib.loads(text).get("assignments", {}))
    if keep is not None and set(parsed.get("assignments", {})) != declared & keep:
        raise SystemExit("gradescope_bundle: could not keep only the bundle's assignments in the course file")
    if any(parsed.get("assignments", {}).get(n, {}).get("extra_cases") != inside for n, inside in extras.items()):
        raise SystemExit("gradescope_bundle: could not point the course file's extra_cases at the bundle's copies "
                         "(write each as extra_cases = \"...\" under its [assignments.<name>] table)")
    return result.encode()


def _submitted_at(meta: dict):
    """When Gradescope received the submission (``created_at``, ISO 8601), or None."""
    import datetime as dt

    when = meta.get("created_at")
    if not when:
        return None
    try:
        value = dt.datetime.fromisoformat(str(when).replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=dt.timezone.utc)


def run(root: Path) -> dict:
    """Grade the notebooks in ``root/submission``; write and return ``root/results/results.json``."""
    source = root / "source"
    sys.path.insert(0, str(source / "src"))
    sys.path.insert(0, str(source / "scripts"))
    import grade as grader
    import lms_export

    settings = json.loads((source / "gradescope.json").read_text())
    meta = {}
    if (root / "submission_metadata.json").is_file():
        meta = json.loads((root / "submission_metadata.json").read_text())
    users = meta.get("users") or [{}]
    student = str(users[0].get("id") or users[0].get("email") or "student")
    references = grader.reference_assignments(source / "notebooks")
    work = Path(tempfile.mkdtemp(prefix="gradescope-"))
    results = root / "results" / "results.json"
    results.parent.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        os.chmod(results.parent, 0o755)  # the notebook's user cannot put a results.json of its own there
    user = os.environ.get("GRADE_SANDBOX_USER", "ab-student")
    box = grader.Sandbox.detect(fallback_user=user)
    if box.kind not in ("bubblewrap", "user"):
        data = {"score": 0.0, "visibility": "visible", "tests": [], "extra_data": {"status": "not graded"},
                "output": "NOT GRADED: the autograder could not isolate your notebook in this container ("
                          + "; ".join(box.missing) + "), so it did not run it. This is not your fault; your "
                          "instructor will grade the submission again."}
        results.write_text(lms_export.dump_json(data), encoding="utf-8")
        shutil.rmtree(work, ignore_errors=True)
        print(data["output"], file=sys.stderr)
        return data
    try:
        folder = work / "subs" / student
        folder.mkdir(parents=True)
        top = root / "submission"
        handed = handed_notebooks(top)
        # as make grade does in a student's folder: only files directly in the submission are graded; one in
        # a subfolder or hidden is copied where it was, so the feedback lists it as not graded (never dropped)
        matched = [p for p in handed if p.parent == top and not p.name.startswith(".")
                   and grader.match_reference(p.name, references)]
        if not matched:
            at_top = sorted(p.name for p in handed if p.parent == top and not p.name.startswith("."))
            # a notebook at the top under another name is misnamed, not "in a folder" (i14)
            why = (f"Your submission's notebook{'s' if len(at_top) > 1 else ''} "
                   f"{', '.join(repr(grader.display_name(n)) for n in at_top)} {'are' if len(at_top) > 1 else 'is'} "
                   "not named as the assignment's, so nothing was graded. Rename your file to "
                   if at_top else "No notebook of this assignment was found at the top of your submission (files "
                   "in a folder are not graded). Hand in ")
            data = {"score": 0.0, "output": why + " or ".join(sorted(references)) + (
                        " and submit again." if at_top else
                        f" (found: {[str(p.relative_to(top)) for p in handed] or 'no notebook'})."),
                    "visibility": "visible", "tests": []}
        else:
            # every file that is (or looks like) an assignment's notebook, under the name and in the folder the
            # student gave it: grade.py picks the one to grade as make grade does, and the feedback names the
            # others (a newer ch03_exercises_final.ipynb beside ch03_exercises.ipynb is not graded, never silently)
            for p in handed:
                if grader.match_reference(p.name, references) or grader.near_reference(p.name, references):
                    (folder / p.relative_to(top)).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(p, folder / p.relative_to(top), follow_symlinks=False)
            course = source / settings["course"] if settings.get("course") else None
            timeout = int(os.environ.get("GRADE_TIMEOUT", str(grader.TIMEOUT)))  # 300 s unless set
            grader.grade(work / "subs", work / "out" / "grades.csv", timeout, source / "notebooks",
                         course_file=course, secret=settings["secret"],
                         submitted={student: when} if (when := _submitted_at(meta)) else None,
                         fallback_user=user, lms_notes=False,  # no canvas.csv advice in Gradescope's log
                         names={student: str(users[0].get("name") or "")})
            data = json.loads((work / "out" / "gradescope" / grader.slug(student) / "results.json").read_text())
            rows = [json.loads(line) for line in (work / "out" / "grades.jsonl").read_text().splitlines() if line]
            failed = {r["assignment"]: r.get("reason", "") for r in rows if r.get("status") == "grader error"}
            if failed:
                data = said_grader_error(data, failed)
    except (Exception, SystemExit) as err:  # noqa: BLE001  the grader's own failure: said in a results.json
        data = {"score": 0.0, "visibility": "visible", "tests": [], "extra_data": {"status": "grader error"},
                "output": "GRADER ERROR: the autograder itself failed on this submission "
                          f"({type(err).__name__}); this is not your fault, and your instructor will grade it again."}
        print(f"grader error: {type(err).__name__}: {err}", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results.write_text(lms_export.dump_json(data), encoding="utf-8")
    return data


GRADER_ERROR = ("The autograder itself failed on this submission: this is not your fault, and your score is "
                "not your grade. Tell your instructor, who will grade it again.")


def said_grader_error(data: dict, failed: dict[str, str]) -> dict:
    """``data`` (a results.json) where the grader failed on the assignments in ``failed`` (name: reason):
    a visible failed test "grader error: tell your instructor" first, no "received and run" test passed
    for them, the status ``grader error`` (``main`` exits 1, so Gradescope shows the instructor a failed
    run). A silent 0.0 beside a passed "received and run" told nobody until the due date."""
    tests = []
    for test in data.get("tests", []):
        name = str(test.get("name", ""))
        if name.split(":", 1)[0] in failed and name.endswith("received and run") and test.get("status") == "passed":
            test = {**test, "status": "failed", "output": GRADER_ERROR}
        tests.append(test)
    for name, reason in failed.items():
        print(f"grader error: {name}: {reason}", file=sys.stderr)
    return {**data, "tests": [{"name": "grader error: tell your instructor", "status": "failed",
                               "visibility": "visible", "output": GRADER_ERROR}, *tests],
            "output": f"**GRADER ERROR.** {GRADER_ERROR}\n\n" + str(data.get("output", "")),
            "extra_data": {**data.get("extra_data", {}), "status": "grader error"}}


def handed_notebooks(top: Path) -> list[Path]:
    """The notebooks a student handed in under ``top``: regular files named ``*.ipynb`` (a folder of
    that name is no notebook), outside ``.ipynb_checkpoints``, and no link nor anything under a link (as
    make grade does: a link could point at any file of the container)."""
    return [p for p in sorted(top.rglob("*.ipynb")) if ".ipynb_checkpoints" not in p.parts
            and not any((top / Path(*p.relative_to(top).parts[:i + 1])).is_symlink()
                        for i in range(len(p.relative_to(top).parts)))
            and p.is_file()]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="write the autograder zip (with a new grading secret: new hidden draws)")
    b.add_argument("--out", type=Path, default=Path("grades/gradescope_autograder.zip"))
    b.add_argument("--notebooks", nargs="*", default=[], help="reference notebooks (default: every one with an "
                   "assignment); upload one bundle per Gradescope assignment")
    b.add_argument("--course", type=Path, default=None)
    sub.add_parser("run", help="inside Gradescope: grade /autograder/submission")
    args = parser.parse_args(argv)
    if args.command == "build":
        print(f"wrote {build(args.out, args.notebooks, args.course)}")
    else:
        data = run(Path(os.environ.get("AUTOGRADER_ROOT", "/autograder")))
        print(f"score {data.get('score')}")
        if data.get("extra_data", {}).get("status") in ("not graded", "grader error"):
            sys.exit(1)


if __name__ == "__main__":
    main()
