"""Point every copy of the repository's address at the one in _config.yml (a fork's step 1).

Usage: python scripts/set_repository.py [--check]

_config.yml's ``repository.url`` and ``.branch`` are the setting: the site's launch, repository
and issue buttons read them directly. Three places must spell the same address, because they run
where _config.yml is not at hand: each notebook's Colab install cell (``pip install "attention-book @
git+URL@BRANCH"``), the setup cell CONTRIBUTING.md gives for new notebooks, and
``REPOSITORY_URL``/``BRANCH`` in src/attention_book/book/source.py (the links of ``ab.show_source``).
This script rewrites them from _config.yml; ``--check`` only lists those that disagree (exit 1).
tests/test_launch.py fails while any disagrees.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
INSTALL = re.compile(r"git\+https://github\.com/[\w.-]+/[\w.-]+?@[\w./-]+?(?=[\"\\])")
SOURCE_URL = re.compile(r'^(REPOSITORY_URL = )"[^"]*"$', re.MULTILINE)
SOURCE_BRANCH = re.compile(r'^(BRANCH = )"[^"]*"$', re.MULTILINE)


def configured(root: Path = ROOT) -> tuple[str, str]:
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))["repository"]
    return config["url"].rstrip("/"), config.get("branch", "main")


def rewrite(text: str, path: Path, url: str, branch: str) -> str:
    if path.suffix == ".py":
        text = SOURCE_URL.sub(lambda m: f'{m[1]}"{url}"', text)
        return SOURCE_BRANCH.sub(lambda m: f'{m[1]}"{branch}"', text)
    return INSTALL.sub(f"git+{url}@{branch}", text)


def targets(root: Path = ROOT) -> list[Path]:
    return (sorted((root / "notebooks").glob("*.ipynb")) + [root / "CONTRIBUTING.md"]
            + [root / "src" / "attention_book" / "book" / "source.py"])


def main(argv: list[str], root: Path = ROOT) -> int:
    url, branch = configured(root)
    stale = []
    for path in targets(root):
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8")
        new = rewrite(text, path, url, branch)
        if new != text:
            stale.append(path.relative_to(root))
            if "--check" not in argv:
                path.write_text(new, encoding="utf-8")
    verb = "disagree with" if "--check" in argv else "now use"
    print(f"set_repository: {len(stale)} files {verb} {url}@{branch}" + "".join(f"\n  {p}" for p in stale))
    return 1 if stale and "--check" in argv else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
