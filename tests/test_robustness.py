"""Bad inputs to the core (data, text, training) give clear errors or fixed behaviour (issue 17)."""

import hashlib
import json
import os
import subprocess
import sys
import time
import zipfile

import pytest
import torch
from torch import nn

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


# --- argument checks -----------------------------------------------------------------------

@pytest.mark.parametrize("bad", [2.5, 2.0, True, "3", None])
def test_check_int_rejects_non_integers_naming_the_argument(bad):
    with pytest.raises(ValueError, match="batch_size must be an integer"):
        ab.check_positive_int("batch_size", bad)


def test_check_int_accepts_integers_and_checks_the_minimum():
    import numpy as np

    assert ab.check_positive_int("n", np.int64(3)) == 3 and type(ab.check_int("n", np.int64(3))) is int
    assert ab.check_int("n", 0, minimum=0) == 0
    with pytest.raises(ValueError, match="n must be at least 1, got 0"):
        ab.check_positive_int("n", 0)
    with pytest.raises(ValueError, match=r"i 3 is out of range for a sequence of size 3 \(valid: 0 to 2\)"):
        ab.check_index("i", 3, 3)


@pytest.mark.parametrize("name", ["batch_size", "num_steps", "num_train", "num_val", "min_freq"])
@pytest.mark.parametrize("bad", [2.5, True])
def test_load_translation_rejects_non_integer_sizes(name, bad):
    pairs = [("Go.", "Va !")] * 8
    with pytest.raises(ValueError, match=f"{name} must be an integer"):
        ab.load_translation(**{name: bad}, **{k: v for k, v in dict(num_train=4, num_val=2).items() if k != name},
                            pairs=pairs, verbose=False)


@pytest.mark.parametrize("bad", [2.5, True])
def test_text_and_data_functions_reject_non_integer_counts(bad):
    with pytest.raises(ValueError, match="num_pairs must be an integer"):
        ab.synthetic_pairs(bad)
    with pytest.raises(ValueError, match="max_pairs must be an integer"):
        ab.parse_pairs("a\tb\n", max_pairs=bad)
    with pytest.raises(ValueError, match="min_freq must be an integer"):
        ab.Vocab(["a"], min_freq=bad)
    with pytest.raises(ValueError, match="k must be an integer"):
        ab.bleu("a b", "a b", k=bad)
    with pytest.raises(ValueError, match="retries must be an integer"):
        ab.fetch("time-machine", retries=bad)


@pytest.mark.parametrize("bad", [2.5, True, 0])
def test_fit_rejects_bad_epochs(bad):
    with pytest.raises(ValueError, match="epochs must be"):
        ab.fit(nn.Linear(1, 1), [torch.zeros(1)], lambda m, b: m(b).sum(), epochs=bad, progress=False)


# --- token ids -------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [-1, 3, 100])
def test_vocab_rejects_out_of_range_ids(bad):
    vocab = ab.Vocab(["a", "b"])  # <unk>, a, b
    for ids in ([0, bad], bad, torch.tensor([bad, 0]), (bad,)):
        with pytest.raises(ValueError, match=f"token id {bad} is out of range for the vocabulary of size 3"):
            vocab.to_tokens(ids)
    assert vocab.to_tokens([0, 1, 2]) == [ab.UNK, "a", "b"]


def test_vocab_rejects_non_integer_ids():
    vocab = ab.Vocab(["a", "b"])
    with pytest.raises(ValueError, match="token id must be an integer, got 1.5"):
        vocab.to_tokens([1.5])
    with pytest.raises(ValueError, match="token id must be an integer, got True"):
        vocab.to_tokens(True)


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


# --- divergence ---------------------------------------------------------------------------------

def _regression_batches():
    ab.seed_everything(0)
    X = torch.randn(64, 3)
    y = X @ torch.tensor([1.0, -2.0, 0.5])
    return [(X[i:i + 16], y[i:i + 16]) for i in range(0, 64, 16)]


def _mse(model, batch):
    x, y = batch
    return nn.functional.mse_loss(model(x).squeeze(-1), y), len(y)


def test_fit_stops_when_the_loss_diverges_naming_the_learning_rate():
    ab.seed_everything(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 1))
    with pytest.raises(FloatingPointError, match=r"(?s)diverged.*learning rate 1000\b.*smaller.*clip_grad"):
        ab.fit(model, _regression_batches(), _mse, epochs=5, lr=1e3, progress=False)


def test_fit_non_finite_loss_names_the_learning_rate():
    ab.seed_everything(0)
    model = nn.Sequential(nn.Linear(3, 8), nn.ReLU(), nn.Linear(8, 1))
    with pytest.raises(FloatingPointError, match=r"learning rate 1000\b.*clip_grad"):
        ab.fit(model, _regression_batches(), _mse, epochs=5, optimizer=torch.optim.SGD(model.parameters(), lr=1e3),
               progress=False)


def test_fit_divergence_check_spares_normal_and_noisy_runs():
    ab.seed_everything(0)
    model = nn.Linear(3, 1)
    history = ab.fit(model, _regression_batches(), _mse, epochs=20, lr=0.05, progress=False)
    assert history.train_loss[-1] < history.train_loss[0]
    # a loss that starts tiny and rises 100-fold is noisy, not diverged (the yardstick is at least 1)
    losses = iter([1e-6, 1e-4, 1e-4])
    model = nn.Linear(1, 1)

    def loss_fn(m, batch):
        return m(batch).sum() * 0 + next(losses)

    assert len(ab.fit(model, [torch.ones(1)], loss_fn, epochs=3, progress=False).train_loss) == 3
