"""Bad inputs to the core (data, text, training) give clear errors or fixed behaviour (issue 17)."""

import hashlib
import json
import os
import subprocess
import sys
import time
import zipfile

import pytest

import attention_book as ab

# The head of the real fra.txt (Tatoeba via manythings.org/anki), tab separated.
REAL_HEAD = "Go.\tVa !\nHi.\tSalut !\nRun!\tCours !\nRun!\tCourez !\nWho?\tQui ?\nWow!\tÇa alors !\n"


def _fra_eng_zip(folder, text: str):
    """A zip with d2l's layout (member ``fra-eng/fra.txt``) in ``folder``; returns its sha1."""
    folder.mkdir(parents=True, exist_ok=True)
    archive = folder / "fra-eng.zip"
    with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("fra-eng/fra.txt", text)
    return hashlib.sha1(archive.read_bytes()).hexdigest()


def _register_fra_eng(digest: str):
    """Point the registry's fra-eng at a zip with this sha1 (the URL is never reached)."""
    ab.register(ab.Dataset(
        name="fra-eng",
        files=(ab.DataFile("fra-eng.zip", ("http://127.0.0.1:9/fra-eng.zip",), f"sha1:{digest}"),),
        local_files=("fra-eng/fra.txt",),
    ))


@pytest.fixture
def restore_fra_eng():
    saved = ab.DATA_HUB["fra-eng"]
    yield
    ab.register(saved)


# --- data files ------------------------------------------------------------------------------

def test_bom_at_start_of_fra_txt_is_dropped(tmp_path, monkeypatch):
    monkeypatch.setenv(ab.DATA_ENV, str(tmp_path))
    (tmp_path / "fra-eng").mkdir()
    (tmp_path / "fra-eng" / "fra.txt").write_bytes(b"\xef\xbb\xbf" + REAL_HEAD.encode())
    text, _ = ab.load_fra_eng_text()
    assert not text.startswith("\ufeff")
    data = ab.load_translation(num_train=4, num_val=2, min_freq=1, verbose=False)
    assert data.raw_pairs[0] == ("Go.", "Va !")
    assert data.src_vocab.to_tokens(data.arrays[0][0, 0]) == "go"


def test_bom_in_the_archive_copy_is_dropped(tmp_path, monkeypatch, restore_fra_eng):
    monkeypatch.setenv(ab.DATA_ENV, str(tmp_path))
    _register_fra_eng(_fra_eng_zip(tmp_path, "\ufeff" + REAL_HEAD))
    text, note = ab.load_fra_eng_text()
    assert "d2l archive" in note and text == REAL_HEAD


def test_non_utf8_data_file_names_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv(ab.DATA_ENV, str(tmp_path))
    path = tmp_path / "fra-eng" / "fra.txt"
    path.parent.mkdir()
    path.write_bytes("Go.\tVa !\nWow!\tÇa alors !\n".encode("latin-1"))
    with pytest.raises(ValueError, match=f"{path} is not UTF-8"):
        ab.load_fra_eng_text()
    with pytest.raises(ValueError, match="is not UTF-8"):  # not silently replaced by the generated corpus
        ab.load_translation(num_train=1, num_val=1, verbose=False)
    with pytest.raises(ValueError, match=f"{path} is not UTF-8"):
        ab.read_utf8(path)


def test_extract_member_leaves_no_temporary_files(tmp_path):
    _fra_eng_zip(tmp_path, REAL_HEAD)
    dest = tmp_path / "out" / "fra.txt"
    assert ab.extract_member(tmp_path / "fra-eng.zip", "fra-eng/fra.txt", dest) == dest
    assert dest.read_text(encoding="utf-8") == REAL_HEAD
    assert sorted(p.name for p in dest.parent.iterdir()) == ["fra.txt"]


_CHILD = r"""
import json, sys, time
from pathlib import Path
import attention_book as ab
folder, digest, index = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
ab.register(ab.Dataset(
    name="fra-eng",
    files=(ab.DataFile("fra-eng.zip", ("http://127.0.0.1:9/fra-eng.zip",), "sha1:" + digest),),
    local_files=("fra-eng/fra.txt",),
))
(folder / f"ready-{index}").touch()
while not (folder / "go").exists():  # start extracting together
    time.sleep(0.0005)
data = ab.load_translation(batch_size=2, num_steps=5, num_train=4, num_val=2, min_freq=1, verbose=False)
print(json.dumps({"note": data.source_note, "first": data.raw_pairs[0]}))
"""


def test_concurrent_first_use_all_read_the_real_data(tmp_path):
    """Three processes that find only the zip, started at once, all train on its sentences."""
    folder = tmp_path / "data"
    # the real head, then enough lines that extracting takes a while (the old fixed
    # temporary name let one process rename away the file another was about to rename)
    filler = "".join(f"Line {i}.\tLigne {i}.\n" for i in range(200_000))
    digest = _fra_eng_zip(folder, REAL_HEAD + filler)
    env = {**os.environ, ab.DATA_ENV: str(folder), "OMP_NUM_THREADS": "1"}
    children = [subprocess.Popen([sys.executable, "-c", _CHILD, str(folder), digest, str(i)], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
    try:
        deadline = time.monotonic() + 120
        while not all((folder / f"ready-{i}").exists() for i in range(3)):
            assert time.monotonic() < deadline, "the child processes did not start"
            assert all(c.poll() is None for c in children), children[0].communicate()
            time.sleep(0.01)
        (folder / "go").touch()
        results = [c.communicate(timeout=120) for c in children]
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
    for child, (out, err) in zip(children, results):
        assert child.returncode == 0, err
        got = json.loads(out.strip().splitlines()[-1])
        assert "d2l archive fra-eng.zip" in got["note"], got["note"]
        assert got["first"] == ["Go.", "Va !"]
    assert (folder / "fra-eng" / "fra.txt").read_text(encoding="utf-8") == REAL_HEAD + filler
    assert not list((folder / "fra-eng").glob("*.part"))
