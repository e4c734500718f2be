"""scripts/vendor_js.py: pinned npm tarballs are used only when their hashes match.

No network here: the tarballs are made in the test, and `npm` is replaced by a
stand-in that "downloads" by copying a prepared file.
"""

from __future__ import annotations

import hashlib
import io
import json
import stat
import sys
import tarfile
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import vendor_js  # noqa: E402


def make_tarball(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def pin_for(data: bytes, **kw) -> vendor_js.Pin:
    base = vendor_js.Pin(name="@scope/demo", version="1.2.3", integrity=vendor_js.integrity_of(data),
                         shasum=hashlib.sha1(data).hexdigest(), strip="package/dist/",
                         dest="demo/", include=("main.js", "fonts/*"))
    return replace(base, **kw)


TARBALL = make_tarball({
    "package/dist/main.js": b"define('x', [], 1);",
    "package/dist/fonts/a.woff2": b"font",
    "package/dist/other.js": b"not wanted",
    "package/README.md": b"readme",
})


def test_pins_are_well_formed():
    for pin in vendor_js.PINS:
        assert pin.integrity.startswith("sha512-") and len(pin.shasum) == 40, pin.spec
        assert pin.strip.endswith("/") and pin.dest.endswith("/") and pin.include, pin.spec
    assert pin_for(TARBALL).tarball == "scope-demo-1.2.3.tgz"  # npm pack's file name


def test_verify_rejects_a_tampered_tarball():
    pin = pin_for(TARBALL)
    vendor_js.verify(pin, TARBALL)
    with pytest.raises(vendor_js.VendorError, match="does not match its pin"):
        vendor_js.verify(pin, TARBALL + b"\0")


def test_extract_takes_only_the_listed_files(tmp_path):
    written = vendor_js.extract(pin_for(TARBALL), TARBALL, tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in written) == [
        "demo/fonts/a.woff2", "demo/main.js"]
    assert (tmp_path / "demo" / "main.js").read_bytes() == b"define('x', [], 1);"
    with pytest.raises(vendor_js.VendorError, match="nothing matches"):
        vendor_js.extract(pin_for(TARBALL, include=("missing.js",)), TARBALL, tmp_path)


def fake_npm(tmp_path: Path, payload: bytes, monkeypatch) -> Path:
    """An `npm` on PATH whose `pack` writes `payload` and reports its integrity."""
    source = tmp_path / "payload.tgz"
    source.write_bytes(payload)
    report = json.dumps([{"name": "@scope/demo", "version": "1.2.3",
                          "integrity": vendor_js.integrity_of(payload)}])
    bindir = tmp_path / "bin"
    bindir.mkdir()
    npm = bindir / "npm"
    npm.write_text(
        "#!/bin/sh\n"
        'while [ "$1" != "--pack-destination" ]; do shift; done\n'
        f'cp "{source}" "$2/scope-demo-1.2.3.tgz"\n'
        f"echo '{report}'\n")
    npm.chmod(npm.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    return npm


def test_fetch_downloads_once_then_uses_the_verified_cache(tmp_path, monkeypatch):
    pin = pin_for(TARBALL)
    fake_npm(tmp_path, TARBALL, monkeypatch)
    cache = tmp_path / "cache"
    assert vendor_js.fetch((pin,), cache) == {pin.spec: TARBALL}
    monkeypatch.setenv("PATH", "/nonexistent")  # no npm now: the cache must be enough
    assert vendor_js.fetch((pin,), cache) == {pin.spec: TARBALL}


def test_fetch_refuses_a_download_that_does_not_match_the_pin(tmp_path, monkeypatch):
    pin = pin_for(TARBALL)
    fake_npm(tmp_path, make_tarball({"package/dist/main.js": b"evil"}), monkeypatch)
    with pytest.raises(vendor_js.VendorError, match="integrity"):
        vendor_js.fetch((pin,), tmp_path / "cache")


def test_a_corrupt_cache_entry_is_fetched_again(tmp_path, monkeypatch):
    pin = pin_for(TARBALL)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / pin.tarball).write_bytes(b"truncated")
    fake_npm(tmp_path, TARBALL, monkeypatch)
    assert vendor_js.fetch((pin,), cache) == {pin.spec: TARBALL}


def test_without_npm_the_error_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(vendor_js.VendorError, match="apt-get install npm"):
        vendor_js.fetch((pin_for(TARBALL),), tmp_path / "cache")


def test_the_live_views_runtime_ships_no_plain_js_file():
    """onnxruntime-web (issue 31) ships as .mjs and .wasm only: Jupyter Book would add any *.js
    file under _static/ to every page of the site."""
    (ort,) = [pin for pin in vendor_js.PINS if pin.name == "onnxruntime-web"]
    assert ort.include and all(p.endswith((".mjs", ".wasm")) for p in ort.include), ort.include
    assert "ort.wasm.min.mjs" in ort.include  # the wasm-only bundle: no WebGL or WebGPU code
    cached = vendor_js.DEFAULT_CACHE / ort.tarball
    if not cached.is_file():
        pytest.skip(f"{ort.spec} not in the npm cache (no network here)")
    data = cached.read_bytes()
    vendor_js.verify(ort, data)


def test_a_suffix_keeps_files_off_the_pages(tmp_path):
    """axe-core is vendored as `axe.min.js.txt`: Jupyter Book would add a `.js` to every page."""
    written = vendor_js.extract(pin_for(TARBALL, include=("main.js",), suffix=".txt"), TARBALL, tmp_path)
    assert [p.relative_to(tmp_path).as_posix() for p in written] == ["demo/main.js.txt"]
    axe = next(p for p in vendor_js.PINS if p.name == "axe-core")
    assert axe.suffix == ".txt" and "axe.min.js" in axe.include
