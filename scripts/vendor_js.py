"""Vendor the website's third-party JavaScript: widgets, MathJax and onnxruntime-web.

Usage: python scripts/vendor_js.py DEST [--cache DIR]

The site ships pinned copies of what its pages would otherwise fetch from CDNs
each time a reader opens them, so the published site and the offline browser
check (tests/test_site.py) run exactly the same files:

- require.js and the Jupyter widget HTML manager (`@jupyter-widgets/html-manager`,
  bundle `embed-amd.js`, with the Font Awesome files its CSS loads): they render
  the ipywidgets saved in executed notebooks. `_config.yml` (`nb_ipywidgets_js`)
  makes myst-nb add them once, and only to pages that carry widget state.
- MathJax 3 (`_config.yml`: `mathjax_path`), with the fonts and the TeX
  extensions it loads on demand.
- onnxruntime-web (wasm backend only), which the live views load on the pages
  that have one, the first time a reader comes to the view.
- axe-core, the accessibility checker that tests/test_accessibility.py injects
  into every built page (issue 38). No page loads it: it is stored as
  `axe-core/axe.min.js.txt`, because Jupyter Book adds every `*.js` of the
  static folders to every page.

`scripts/stage.py` calls this for the staged book (DEST = `_stage/_vendor`,
listed in `html_static_path`, so the files land in `_static/` of the site).
Tarballs come from the npm registry through `npm pack`, are cached in
`_build/cache/npm`, and are used only if their SHA-512 (npm's `integrity`) and
SHA-1 (`shasum`) equal the pins below: a mismatch is an error, never a warning.
To upgrade a pin: `npm view PACKAGE@VERSION dist --json` prints both values.
"""

from __future__ import annotations

import argparse
import base64
import fnmatch
import hashlib
import io
import json
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CACHE = ROOT / "_build" / "cache" / "npm"


@dataclass(frozen=True)
class Pin:
    name: str
    version: str
    integrity: str  # "sha512-<base64>", as npm's lockfile and `npm view ... dist` give it
    shasum: str  # SHA-1 in hex, `npm view ... dist.shasum`
    strip: str  # folder inside the tarball whose files are taken ...
    dest: str  # ... and written under this folder of DEST
    include: tuple[str, ...]  # glob patterns (fnmatch: "*" crosses "/") relative to `strip`
    suffix: str = ""  # appended to every file name written (".txt": kept off the pages)

    @property
    def spec(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def tarball(self) -> str:
        """The file name `npm pack` gives the tarball."""
        return f"{self.name.lstrip('@').replace('/', '-')}-{self.version}.tgz"


PINS = (
    Pin(
        name="requirejs",
        version="2.3.8",
        integrity="sha512-7/cTSLOdYkNBNJcDMWf+luFvMriVm7eYxp4BcFCsAX0wF421Vyce5SXP17c+Jd5otXKGNehIonFlyQXSowL6Mw==",
        shasum="bca0614b618ab2122462597e44878db7558bbba3",
        strip="package/",
        dest="widgets/",
        include=("require.js",),
    ),
    # html-manager 1.0.x renders ipywidgets 8 state (controls model version 2.0.0)
    # and, through its bundled base7/controls7, ipywidgets 7 state as well.
    Pin(
        name="@jupyter-widgets/html-manager",
        version="1.0.15",
        integrity="sha512-5thBIV6ymNgmPVOHvzx+gGy8ZSKmSazhtGw4/c4xJDVzRhG9PTeQsRjF3FUTopvFi//SABeNz1yp47bCrJ3CQA==",
        shasum="3d82fba512edcab82512e679be25c917f1b83fd1",
        strip="package/dist/",
        dest="widgets/html-manager/",
        include=("embed-amd.js", "embed.js.LICENSE.txt", "*.woff2", "*.woff", "*.ttf", "*.eot", "*.svg"),
    ),
    Pin(
        name="mathjax",
        version="3.2.2",
        integrity="sha512-Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw==",
        shasum="c754d7b46a679d7f3fa03543d6b8bf124ddf9f6b",
        strip="package/es5/",
        dest="mathjax/",
        # The combined component and everything it may load on demand
        # (TeX extensions, CHTML fonts, the context menu and accessibility).
        include=("tex-mml-chtml.js", "input/*", "output/chtml.js", "output/chtml/*",
                 "a11y/*", "ui/*", "sre/*", "adaptors/*"),
    ),
    # The live views (src/attention_book/book/live.py, book/_static/live/live.mjs) run the
    # chapters' models with onnxruntime-web: its wasm-only ES module, the wasm binary and the
    # module that loads it. Only .mjs and .wasm: Jupyter Book adds every *.js under _static/
    # to every page.
    Pin(
        name="onnxruntime-web",
        version="1.30.0",
        integrity="sha512-q0y+JrrtukXSzsBWEMccVfqX25LRmosXHF+CaRJmg8pZClzcV7svNc4rKY3jL02Vb7QmRMDs1SigqR4CXAfKYQ==",
        shasum="b88b09117992e6f486321e931a826fd2f7775377",
        strip="package/dist/",
        dest="onnxruntime-web/",
        include=("ort.wasm.min.mjs", "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm"),
    ),
    # The accessibility check of the built site (tests/test_accessibility.py, issue 38).
    Pin(
        name="axe-core",
        version="4.14.1",
        integrity="sha512-FHfa+lmNjQZfJz1q8wKqIDwC6DExcHt/pkjNQb09a3NPjCKg2rhu5qb2S4r76ASyFNNtuFooJpZe37OgudVGtQ==",
        shasum="14d8a6f3f085afd126b8b5ca1e42e50e17fb1d99",
        strip="package/",
        dest="axe-core/",
        include=("axe.min.js", "LICENSE"),
        suffix=".txt",
    ),
)


class VendorError(RuntimeError):
    pass


def integrity_of(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def verify(pin: Pin, data: bytes) -> None:
    got_integrity, got_shasum = integrity_of(data), hashlib.sha1(data).hexdigest()
    if got_integrity != pin.integrity or got_shasum != pin.shasum:
        raise VendorError(
            f"{pin.spec}: tarball does not match its pin\n"
            f"  integrity: got {got_integrity}, pinned {pin.integrity}\n"
            f"  shasum:    got {got_shasum}, pinned {pin.shasum}"
        )


def _cached(pin: Pin, cache: Path) -> bytes | None:
    path = cache / pin.tarball
    if not path.exists():
        return None
    data = path.read_bytes()
    try:
        verify(pin, data)
    except VendorError:
        path.unlink()  # a corrupt or stale download is fetched again, never used
        return None
    return data


def fetch(pins: tuple[Pin, ...], cache: Path) -> dict[str, bytes]:
    """Each pinned tarball's verified bytes, by spec; missing ones come from `npm pack`."""
    cache.mkdir(parents=True, exist_ok=True)
    have = {pin.spec: data for pin in pins if (data := _cached(pin, cache)) is not None}
    missing = [pin for pin in pins if pin.spec not in have]
    if not missing:
        return have
    npm = shutil.which("npm")
    if npm is None:
        raise VendorError(
            "npm is needed to fetch the site's JavaScript from the npm registry "
            f"({', '.join(p.spec for p in missing)}).\n"
            "Install Node.js with npm (Debian/Ubuntu: apt-get install npm) and run again."
        )
    cmd = [npm, "pack", "--json", "--pack-destination", str(cache),
           "--cache", str(cache / "_npm-cache"), *(p.spec for p in missing)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise VendorError(f"`{' '.join(cmd)}` failed:\n{proc.stderr.strip()}")
    reported = {(d["name"], d["version"]): d for d in json.loads(proc.stdout)}
    for pin in missing:
        info = reported.get((pin.name, pin.version), {})
        if info.get("integrity") != pin.integrity:
            raise VendorError(f"npm pack reported integrity {info.get('integrity')} for "
                              f"{pin.spec}; pinned {pin.integrity}")
        data = (cache / pin.tarball).read_bytes()
        verify(pin, data)  # npm checked it; check the very bytes used here too
        have[pin.spec] = data
    return have


def extract(pin: Pin, data: bytes, dest: Path) -> list[Path]:
    written = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        members = [m for m in tar.getmembers() if m.isfile() and m.name.startswith(pin.strip)]
        for pattern in pin.include:
            chosen = [m for m in members if fnmatch.fnmatchcase(m.name[len(pin.strip):], pattern)]
            if not chosen:
                raise VendorError(f"{pin.spec}: nothing matches {pin.strip}{pattern} in the tarball")
            for member in chosen:
                rel = member.name[len(pin.strip):]
                if ".." in Path(rel).parts:
                    raise VendorError(f"{pin.spec}: unsafe path {member.name!r}")
                out = dest / pin.dest / (rel + pin.suffix)
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(tar.extractfile(member).read())
                written.append(out)
    return written


def vendor(dest: Path, cache: Path = DEFAULT_CACHE) -> list[Path]:
    """Write the pinned files under `dest`; returns the files written."""
    dest = Path(dest)
    tarballs = fetch(PINS, Path(cache))
    for folder in {pin.dest.split("/")[0] for pin in PINS}:
        if (dest / folder).exists():
            shutil.rmtree(dest / folder)
    written = []
    for pin in PINS:
        written += extract(pin, tarballs[pin.spec], dest)
    (dest / "VENDORED.txt").write_text(
        "Written by scripts/vendor_js.py from the npm registry:\n"
        + "".join(f"{p.spec} {p.integrity}\n" for p in PINS), encoding="utf-8")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    args = parser.parse_args(argv)
    try:
        files = vendor(args.dest, args.cache)
    except VendorError as err:
        print(f"vendor_js: {err}", file=sys.stderr)
        return 1
    print(f"vendor_js: {', '.join(p.spec for p in PINS)} -> {args.dest} ({len(files)} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
