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
    ab.data.registry.register(ab.data.registry.Dataset(
        name="fra-eng",
        files=(ab.data.registry.DataFile("fra-eng.zip", ("http://127.0.0.1:9/fra-eng.zip",), f"sha1:{digest}"),),
        local_files=("fra-eng/fra.txt",),
    ))


@pytest.fixture
def restore_fra_eng():
    saved = ab.data.registry.DATA_HUB["fra-eng"]
    yield
    ab.data.registry.register(saved)


# --- argument checks -----------------------------------------------------------------------

@pytest.mark.parametrize("bad", [2.5, 2.0, True, "3", None])
def test_check_int_rejects_non_integers_naming_the_argument(bad):
    with pytest.raises(ValueError, match="batch_size must be an integer"):
        ab.core.checks.check_positive_int("batch_size", bad)


def test_check_int_accepts_integers_and_checks_the_minimum():
    import numpy as np

    assert ab.core.checks.check_positive_int("n", np.int64(3)) == 3 and type(ab.core.checks.check_int("n", np.int64(3))) is int
    assert ab.core.checks.check_int("n", 0, minimum=0) == 0
    with pytest.raises(ValueError, match="n must be at least 1, got 0"):
        ab.core.checks.check_positive_int("n", 0)
    with pytest.raises(ValueError, match=r"i 3 is out of range for a sequence of size 3 \(valid: 0 to 2\)"):
        ab.core.checks.check_index("i", 3, 3)


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
        ab.data.text.synthetic_pairs(bad)
    with pytest.raises(ValueError, match="max_pairs must be an integer"):
        ab.data.text.parse_pairs("a\tb\n", max_pairs=bad)
    with pytest.raises(ValueError, match="min_freq must be an integer"):
        ab.data.text.Vocab(["a"], min_freq=bad)
    with pytest.raises(ValueError, match="k must be an integer"):
        ab.bleu("a b", "a b", k=bad)
    with pytest.raises(ValueError, match="retries must be an integer"):
        ab.data.registry.fetch("time-machine", retries=bad)


@pytest.mark.parametrize("bad", [2.5, True, 0])
def test_fit_rejects_bad_epochs(bad):
    with pytest.raises(ValueError, match="epochs must be"):
        ab.fit(nn.Linear(1, 1), [torch.zeros(1)], lambda m, b: m(b).sum(), epochs=bad, progress=False)


# --- token ids -------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [-1, 3, 100])
def test_vocab_rejects_out_of_range_ids(bad):
    vocab = ab.data.text.Vocab(["a", "b"])  # <unk>, a, b
    for ids in ([0, bad], bad, torch.tensor([bad, 0]), (bad,)):
        with pytest.raises(ValueError, match=f"token id {bad} is out of range for the vocabulary of size 3"):
            vocab.to_tokens(ids)
    assert vocab.to_tokens([0, 1, 2]) == [ab.data.text.UNK, "a", "b"]


def test_vocab_rejects_non_integer_ids():
    vocab = ab.data.text.Vocab(["a", "b"])
    with pytest.raises(ValueError, match="token id must be an integer, got 1.5"):
        vocab.to_tokens([1.5])
    with pytest.raises(ValueError, match="token id must be an integer, got True"):
        vocab.to_tokens(True)


# --- data files ------------------------------------------------------------------------------

def test_bom_at_start_of_fra_txt_is_dropped(tmp_path, monkeypatch):
    monkeypatch.setenv(ab.core.config.DATA_ENV, str(tmp_path))
    (tmp_path / "fra-eng").mkdir()
    (tmp_path / "fra-eng" / "fra.txt").write_bytes(b"\xef\xbb\xbf" + REAL_HEAD.encode())
    text, _ = ab.data.text.load_fra_eng_text()
    assert not text.startswith("\ufeff")
    data = ab.load_translation(num_train=4, num_val=2, min_freq=1, verbose=False)
    assert data.raw_pairs[0] == ("Go.", "Va !")
    assert data.src_vocab.to_tokens(data.arrays[0][0, 0]) == "go"


def test_bom_in_the_archive_copy_is_dropped(tmp_path, monkeypatch, restore_fra_eng):
    monkeypatch.setenv(ab.core.config.DATA_ENV, str(tmp_path))
    _register_fra_eng(_fra_eng_zip(tmp_path, "\ufeff" + REAL_HEAD))
    text, note = ab.data.text.load_fra_eng_text()
    assert "d2l archive" in note and text == REAL_HEAD


def test_non_utf8_data_file_names_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv(ab.core.config.DATA_ENV, str(tmp_path))
    path = tmp_path / "fra-eng" / "fra.txt"
    path.parent.mkdir()
    path.write_bytes("Go.\tVa !\nWow!\tÇa alors !\n".encode("latin-1"))
    with pytest.raises(ValueError, match=f"{path} is not UTF-8"):
        ab.data.text.load_fra_eng_text()
    with pytest.raises(ValueError, match="is not UTF-8"):  # not silently replaced by the generated corpus
        ab.load_translation(num_train=1, num_val=1, verbose=False)
    with pytest.raises(ValueError, match=f"{path} is not UTF-8"):
        ab.data.registry.read_utf8(path)


def test_extract_member_leaves_no_temporary_files(tmp_path):
    _fra_eng_zip(tmp_path, REAL_HEAD)
    dest = tmp_path / "out" / "fra.txt"
    assert ab.data.registry.extract_member(tmp_path / "fra-eng.zip", "fra-eng/fra.txt", dest) == dest
    assert dest.read_text(encoding="utf-8") == REAL_HEAD
    assert sorted(p.name for p in dest.parent.iterdir()) == ["fra.txt"]


_CHILD = r"""
import json, sys, time
from pathlib import Path
import attention_book as ab
folder, digest, index = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
ab.data.registry.register(ab.data.registry.Dataset(
    name="fra-eng",
    files=(ab.data.registry.DataFile("fra-eng.zip", ("http://127.0.0.1:9/fra-eng.zip",), "sha1:" + digest),),
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
    env = {**os.environ, ab.core.config.DATA_ENV: str(folder), "OMP_NUM_THREADS": "1"}
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


# --- inputs on another device than the module ----------------------------------------------

def _ids(batch, length, vocab):
    return torch.randint(0, vocab, (batch, length), generator=torch.Generator().manual_seed(0))


def _device_cases():
    """(name, model, call(model, device)): each call feeds inputs made on ``device``."""
    def qkv(dev, d=8):
        return [torch.randn(2, 3, d, device=dev)] * 3

    seq2seq = ab.make_seq2seq(11, 13, 8, 16, 1)
    transformer = ab.make_transformer(11, 13, 16, 32, 2, 1, 0.0)
    return {
        "MultiHeadAttention": (ab.MultiHeadAttention(8, 2), lambda m, dev: m(*qkv(dev))),
        "AdditiveAttention": (ab.AdditiveAttention(4, query_size=8, key_size=8), lambda m, dev: m(*qkv(dev))),
        "BilinearAttention": (ab.BilinearAttention(8, 8), lambda m, dev: m(*qkv(dev))),
        "TransformerEncoder": (transformer.encoder, lambda m, dev: m(_ids(2, 5, 11).to(dev))),
        "TransformerDecoder": (transformer.decoder,
                               lambda m, dev: m(_ids(2, 4, 13).to(dev), m.init_state(torch.zeros(2, 5, 16, device=dev)))),
        "Seq2SeqEncoder": (seq2seq.encoder, lambda m, dev: m(_ids(2, 5, 11).to(dev))),
        "Seq2SeqAttentionDecoder": (seq2seq.decoder, lambda m, dev: m(_ids(2, 4, 13).to(dev), (
            torch.zeros(2, 5, 16, device=dev), torch.zeros(2, 1, 16, device=dev), None))),
        "Seq2SeqDecoder": (ab.make_seq2seq(11, 13, 8, 16, 1, attention=None).decoder,
                           lambda m, dev: m(_ids(2, 4, 13).to(dev), (torch.zeros(2, 16, device=dev),
                                                                     torch.zeros(2, 1, 16, device=dev)))),
        "ViT": (ab.ViT(28, 14, 16, 32, 2, 1, 0.0, 0.0), lambda m, dev: m(torch.randn(2, 1, 28, 28, device=dev))),
        "OffsetTaskModel": (ab.experiments.offset_task.OffsetTaskModel(num_heads=2), lambda m, dev: m(_ids(2, 8, 8).to(dev))),
        "SequencePredictor": (ab.experiments.reversal.SequencePredictor(10, 16, 2), lambda m, dev: m(_ids(2, 7, 10).to(dev))),
        "NadarayaWatson": (ab.models.kernels.NadarayaWatson(torch.rand(5), torch.rand(5)), lambda m, dev: m(torch.rand(3, device=dev))),
    }


@pytest.mark.parametrize("name", sorted(_device_cases()))
def test_input_on_another_device_names_both_devices(name):
    model, call = _device_cases()[name]
    with pytest.raises(ValueError, match="is on device meta but .* parameters are on device cpu"):
        call(model, "meta")  # a CPU model given meta input (returned garbage or NaN before)
    model.to("meta")
    with pytest.raises(ValueError, match="is on device cpu but .* parameters are on device meta"):
        call(model, "cpu")  # a meta model given CPU input (returned uninitialised memory before)
    call(model, "meta")  # same device: runs


def test_check_same_device_reads_no_values_and_skips_modules_without_parameters():
    ab.core.checks.check_same_device("X", torch.zeros(2, device="meta"), ab.DotProductAttention())
    ab.core.checks.check_same_device("X", [1, 2], nn.Linear(2, 2))  # not a tensor: other checks deal with it
    with pytest.raises(ValueError, match=r"X is on device meta but Linear's parameters are on device cpu; "
                                         r".*X.to\('cpu'\)"):
        ab.core.checks.check_same_device("X", torch.zeros(2, device="meta"), nn.Linear(2, 2))


# --- sizes that are not integers -------------------------------------------------------------

@pytest.mark.parametrize("bad", [2.0, 2.5, True, "2"])
def test_num_heads_must_be_an_integer(bad):
    for make in (lambda: ab.MultiHeadAttention(8, bad),
                 lambda: ab.TransformerEncoder(11, 8, 16, bad, 1),
                 lambda: ab.TransformerDecoderBlock(8, 16, bad),
                 lambda: ab.ViT(28, 14, 8, 16, bad, 1, 0.0, 0.0),
                 lambda: ab.experiments.offset_task.OffsetTaskModel(num_heads=bad),
                 lambda: ab.experiments.reversal.SequencePredictor(10, 8, bad),
                 lambda: ab.transpose_qkv(torch.zeros(1, 2, 8), bad)):
        with pytest.raises(ValueError, match="num_heads must be an integer"):
            make()


@pytest.mark.parametrize("call, name", [
    (lambda: ab.MultiHeadAttention(8.0, 2), "num_hiddens"),
    (lambda: ab.MultiHeadAttention(8, 2, query_size=4.0), "query_size"),
    (lambda: ab.AdditiveAttention(4, query_size=2.5), "query_size"),
    (lambda: ab.TransformerEncoder(11, 8, 16, 2, 1.0), "num_blks"),
    (lambda: ab.TransformerEncoder(11, 8, 16.0, 2, 1), "ffn_num_hiddens"),
    (lambda: ab.TransformerDecoder(11.0, 8, 16, 2, 1), "vocab_size"),
    (lambda: ab.TransformerEncoder(11, 8, 16, 2, 1, max_len=10.5), "max_len"),
    (lambda: ab.make_transformer(11, 13, 8, 16, 2, True), "num_blks"),
    (lambda: ab.make_seq2seq(11, 13, 8, 16, 2.0), "num_layers"),
    (lambda: ab.Seq2SeqAttentionDecoder(13, 8, 16.5, 1), "num_hiddens"),
    (lambda: ab.Seq2SeqDecoder(13, True, 16, 1), "embed_size"),
    (lambda: ab.ViT(28, 14, 16, 32, 2, 1.5, 0.0, 0.0), "num_blks"),
    (lambda: ab.ViT(28, 14, 16, 32.0, 2, 1, 0.0, 0.0), "mlp_num_hiddens"),
    (lambda: ab.data.images.ImageBatches(torch.zeros(4, 1, 8, 8), torch.zeros(4), 2.0, 8), "batch_size"),
    (lambda: ab.experiments.reversal.reverse_loaders(batch_size=2.5), "batch_size"),
    (lambda: ab.experiments.reversal.reverse_dataset(10.0), "num_samples"),
    (lambda: ab.core.train.warmup_cosine_factor(0, 1, 10.0), "max_steps"),
    (lambda: ab.experiments.offset_task.make_offset_task(10, seq_len=8.0), "seq_len"),
    (lambda: ab.LearnedPositionalEmbedding(8, max_len=4.0), "max_len"),
    (lambda: ab.sinusoidal_table(4, 8.0), "num_hiddens"),
    (lambda: ab.BilinearAttention(4, 3.0), "key_size"),
    (lambda: ab.scoring_cost("dot", 8, 4, repeats=1.5), "repeats"),
    (lambda: ab.make_kernel_data(n_train=4.0), "n_train"),
    (lambda: ab.experiments.layer_comparison.time_sequence_layers([4, 8.0]), r"lengths\[1\]"),
])
def test_sizes_must_be_integers_naming_the_argument(call, name):
    with pytest.raises(ValueError, match=f"{name} must be an integer"):
        call()


def _tiny_seq2seq():
    torch.manual_seed(0)
    return ab.make_seq2seq(11, 13, 8, 16, 1), _ids(2, 5, 11)


@pytest.mark.parametrize("bad", [2.5, True, 0])
def test_beam_size_must_be_a_positive_integer(bad):
    model, src = _tiny_seq2seq()
    with pytest.raises(ValueError, match="beam_size must be"):
        ab.beam_search(model, src, None, 1, 2, max_steps=3, beam_size=bad)


@pytest.mark.parametrize("bad", [2.5, True])
def test_max_steps_must_be_an_integer(bad):
    model, src = _tiny_seq2seq()
    with pytest.raises(ValueError, match="max_steps must be an integer"):
        ab.greedy_search(model, src, None, 1, 2, max_steps=bad)
    with pytest.raises(ValueError, match="max_steps must be an integer"):
        ab.beam_search(model, src, None, 1, 2, max_steps=bad)
    with pytest.raises(ValueError, match="max_steps must be an integer"):
        ab.greedy_without_cache(ab.make_transformer(11, 13, 8, 16, 2, 1, 0.0), src, None, 1, 2, max_steps=bad)


@pytest.mark.parametrize("bad", [1.0, -0.1, "0.1", True])
def test_dropout_must_be_a_number_in_range(bad):
    for make in (lambda: ab.MultiHeadAttention(8, 2, bad), lambda: ab.DotProductAttention(bad),
                 lambda: ab.TransformerEncoder(11, 8, 16, 2, 1, bad), lambda: ab.Seq2SeqEncoder(11, 8, 16, 1, bad),
                 lambda: ab.DistanceAttention(bad)):
        with pytest.raises(ValueError, match="dropout must"):
            make()
    with pytest.raises(ValueError, match="blk_dropout must"):
        ab.ViT(28, 14, 16, 32, 2, 1, 0.0, bad)


def test_check_heads_lists_the_head_counts_that_work():
    assert ab.core.checks.check_heads(12, 4) == (12, 4)
    with pytest.raises(ValueError, match=r"num_hiddens=30 is not divisible by num_heads=4; .*\[1, 2, 3, 5, 6, 10, 15, 30\]"):
        ab.core.checks.check_heads(30, 4)


# --- evaluation helpers restore the model's mode -----------------------------------------------

class _Failing(nn.Module):
    """Fails in eval mode, as a model whose forward raises halfway through an evaluation would."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(1, 1)

    def forward(self, *args, **kwargs):
        raise RuntimeError("boom")


@pytest.mark.parametrize("helper", [
    lambda m: ab.accuracy(m, [(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long))], scores=m.forward),
    lambda m: ab.accuracy(m, [(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, 3, dtype=torch.long))]),
    lambda m: ab.accuracy(m, [(torch.zeros(2, 1, 4, 4), torch.zeros(2, dtype=torch.long))]),
])
def test_evaluation_helpers_restore_train_mode_even_on_error(helper):
    model = _Failing().train()
    with pytest.raises(RuntimeError, match="boom"):
        helper(model)
    assert model.training


def test_decoding_restores_the_mode_it_found():
    model, src = _tiny_seq2seq()
    for mode in (True, False):
        model.train(mode)
        ab.beam_search(model, src, None, 1, 2, max_steps=3, beam_size=2)
        ab.greedy_search(model, src, None, 1, 2, max_steps=3)
        assert model.training is mode
