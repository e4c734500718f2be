"""Tests of the translation text pipeline: preprocessing, vocabularies, arrays, BLEU."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import attention_book as ab
from attention_book.data import text as abtext

PAIRS = [
    ("Go.", "Va !"),
    ("I lost.", "J'ai perdu."),
    ("He's calm.", "Il est calme."),
    ("I'm home.", "Je suis chez moi."),
    ("I'm calm.", "Je suis calme."),
    ("Go.", "Bouge !"),
]


# --- preprocessing and tokens ---------------------------------------------------------------

def test_preprocess_matches_d2l_format():
    assert ab.data.text.preprocess_nmt("Go.") == "go ."
    assert ab.data.text.preprocess_nmt("Hi!\u202fYou?") == "hi ! you ?"
    assert ab.data.text.preprocess_nmt("Va\xa0!") == "va !"
    assert ab.data.text.preprocess_nmt("a , b") == "a , b"  # already spaced: no double space
    assert ab.data.text.preprocess_nmt("He's calm, I'm not.") == "he's calm , i'm not ."
    assert ab.data.text.preprocess_nmt("") == ""


def test_tokenize_appends_eos_and_drops_empty_tokens():
    assert ab.data.text.tokenize_nmt("i lost .") == ["i", "lost", ".", ab.data.text.EOS]
    assert ab.data.text.tokenize_nmt("  a   b ") == ["a", "b", ab.data.text.EOS]
    assert ab.data.text.tokenize_nmt("") == [ab.data.text.EOS]


# --- parsing ---------------------------------------------------------------------------------

def test_parse_pairs_skips_blank_lines_and_extra_columns():
    text = "Go.\tVa !\tCC-BY 2.0\n\nRun!\tCours !\n"
    assert ab.data.text.parse_pairs(text) == [("Go.", "Va !"), ("Run!", "Cours !")]
    assert ab.data.text.parse_pairs(text, max_pairs=1) == [("Go.", "Va !")]


@pytest.mark.parametrize("bad, number", [("Go.\tVa !\nno tab here\n", 2), ("Go.\tVa !\n\n\t\tCours\n", 3),
                                         ("Go.\t \n", 1)])
def test_parse_pairs_names_the_malformed_line(bad, number):
    with pytest.raises(ValueError, match=f"myfile, line {number}: expected 'english<TAB>french'"):
        ab.data.text.parse_pairs(bad, source="myfile")


# --- vocabulary --------------------------------------------------------------------------------

def test_vocab_reserved_min_freq_and_unknown():
    vocab = ab.data.text.Vocab([["a", "b", "a"], ["c", "a", "b"]], min_freq=2, reserved_tokens=[ab.data.text.PAD, ab.data.text.EOS])
    assert vocab.to_tokens([0, 1, 2]) == [ab.data.text.UNK, ab.data.text.PAD, ab.data.text.EOS]
    assert vocab["a"] == 3 and vocab["b"] == 4  # most frequent first
    assert vocab["c"] == vocab.unk == 0  # below min_freq -> <unk>
    assert vocab["never seen"] == 0
    assert len(vocab) == 5
    with pytest.raises(ValueError, match="min_freq"):
        ab.data.text.Vocab([], min_freq=0)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["le", "chat", "noir", "dort", ".", "!"]), min_size=1, max_size=6),
                min_size=1, max_size=8))
def test_vocab_round_trip(sentences):
    vocab = ab.data.text.Vocab(sentences)
    for sentence in sentences:
        assert vocab.to_tokens(vocab[sentence]) == sentence
        assert vocab.to_tokens(torch.tensor(vocab[sentence])) == sentence
    assert sorted(vocab.idx_to_token) == sorted(set(vocab.idx_to_token))  # no duplicates


# --- arrays ----------------------------------------------------------------------------------

def _data(num_steps=5):
    return ab.load_translation(batch_size=2, num_steps=num_steps, num_train=4, num_val=2, min_freq=1,
                               pairs=PAIRS, verbose=False)


def test_arrays_shapes_shift_and_valid_lengths():
    data = _data(num_steps=5)
    src, tgt_in, valid, label = data.arrays
    assert src.shape == tgt_in.shape == label.shape == (6, 5) and valid.shape == (6,)
    tv, sv = data.tgt_vocab, data.src_vocab
    assert torch.all(tgt_in[:, 0] == tv[ab.data.text.BOS])
    assert torch.equal(tgt_in[:, 1:], label[:, :-1])  # teacher forcing: the label shifted right
    assert sv.to_tokens(src[2]) == ["he's", "calm", ".", ab.data.text.EOS, ab.data.text.PAD]
    assert tv.to_tokens(label[3]) == ["je", "suis", "chez", "moi", "."]  # trimmed: no room for <eos>
    assert valid.tolist() == [3, 4, 4, 4, 4, 3]  # real tokens incl. <eos>, at most num_steps
    assert valid.tolist() == (src != sv[ab.data.text.PAD]).sum(1).tolist()


def test_loaders_split_and_batch():
    data = _data()
    train = list(data.train_loader())
    val = list(data.val_loader())
    assert sum(len(b[0]) for b in train) == 4 and sum(len(b[0]) for b in val) == 2
    assert torch.equal(val[0][0], data.arrays[0][4:6])  # validation = the pairs after the training ones
    # the training order is reproducible for a seed
    assert torch.equal(next(iter(data.train_loader(seed=1)))[0], next(iter(data.train_loader(seed=1)))[0])


def test_vocabularies_come_from_the_training_pairs_only():
    data = _data()
    assert "bouge" not in data.tgt_vocab.token_to_idx  # "Bouge !" is a validation pair
    assert data.tgt_vocab["bouge"] == 0


def test_build_unknown_empty_and_long_sentences():
    data = _data(num_steps=5)
    src, tgt_in, valid, label = data.build(["Go.", "Zorglub go.", "", "i'm calm i'm calm i'm calm"],
                                           ["Va !", "", "", "je suis calme"])
    sv = data.src_vocab
    assert sv.to_tokens(src[1][:3]) == [ab.data.text.UNK, "go", "."]  # unknown word -> <unk>
    assert sv.to_tokens(src[2]) == [ab.data.text.EOS] + [ab.data.text.PAD] * 4  # empty sentence -> just <eos>
    assert valid[2] == 1
    assert valid[3] == 5 and ab.data.text.EOS not in sv.to_tokens(src[3])  # too long: trimmed to num_steps
    assert tgt_in.shape == label.shape == (4, 5)
    with pytest.raises(ValueError, match="2 source but 1 target"):
        data.build(["a", "b"], ["c"])


def test_load_translation_rejects_bad_sizes():
    with pytest.raises(ValueError, match="num_steps must be at least 2"):
        ab.load_translation(num_steps=1, pairs=PAIRS)
    with pytest.raises(ValueError, match="6 pairs but num_train \\+ num_val = 10"):
        ab.load_translation(num_train=8, num_val=2, pairs=PAIRS, verbose=False)


def test_real_data_when_present(monkeypatch):
    if ab.data.registry.find_local("fra-eng") is None:
        pytest.skip("fra-eng/fra.txt is not in the data directory")
    data = ab.load_translation(verbose=False)
    assert (data.num_train, data.num_val, data.num_steps) == (512, 128, 9)
    assert data.raw_pairs[0] == ("Go.", "Va !")
    assert data.src_vocab["go"] != 0 and data.tgt_vocab["perdu"] != 0
    assert "local copy" in data.source_note


def test_fallback_corpus_when_data_unavailable(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv(ab.core.config.DATA_ENV, str(tmp_path))

    def offline(name):
        raise ab.data.registry.DataUnavailableError("no network here")

    monkeypatch.setattr(abtext, "fetch", offline)
    data = ab.load_translation()
    assert "generated fallback corpus" in data.source_note and "no network here" in data.source_note
    assert "generated fallback corpus" in capsys.readouterr().out
    assert data.raw_pairs == ab.data.text.synthetic_pairs(640)


def test_synthetic_corpus_is_reproducible_and_has_the_chapter_sentences():
    pairs = ab.data.text.synthetic_pairs(640)
    assert pairs == ab.data.text.synthetic_pairs(640) and pairs != ab.data.text.synthetic_pairs(640, seed=1)
    train = dict(pairs[:512])
    assert train["go ."] == "va !" and train["i lost ."] == "j'ai perdu ."
    assert train["he's calm ."] == "il est calme ." and train["i'm home ."] == "je suis chez moi ."
    # French agreement: feminine and plural adjectives
    assert ("she's tired .", "elle est fatiguée .") in pairs or ("she is tired .", "elle est fatiguée .") in pairs
    assert all(ab.data.text.parse_pairs(f"{en}\t{fr}") == [(en, fr)] for en, fr in pairs)
    with pytest.raises(ValueError, match="num_pairs"):
        ab.data.text.synthetic_pairs(-1)


# --- BLEU --------------------------------------------------------------------------------------

def test_bleu_hand_checked_cases():
    assert ab.bleu("je suis chez moi .", "je suis chez moi .", k=2) == pytest.approx(1.0)
    # one wrong word of four: p1 = 3/4, p2 = 1/3 -> (3/4)^(1/2) (1/3)^(1/4) = 0.658 (the seed's he's-calm score)
    assert ab.bleu("il est paresseux .", "il est calme .", k=2) == pytest.approx(0.6580, abs=5e-5)
    # too short: brevity penalty exp(1 - 5/2), all n-grams match
    assert ab.bleu("je suis", "je suis chez moi .", k=2) == pytest.approx(math.exp(-1.5))
    # clipped counts: "le" occurs once in the label, so only one of three matches
    assert ab.bleu("le le le", "le chat", k=1) == pytest.approx((1 / 3) ** 0.5)
    assert ab.bleu("le le le", "le chat", k=2) == 0.0  # no bigram matches
    # k larger than the prediction: n stops at len(pred)
    assert ab.bleu("va", "va !", k=4) == pytest.approx(math.exp(1 - 2))
    assert ab.bleu("", "va !") == 0.0


def test_bleu_bad_input():
    with pytest.raises(ValueError, match="k must be at least 1"):
        ab.bleu("a", "a", k=0)
    with pytest.raises(ValueError, match="non-empty label"):
        ab.bleu("a", "")


@settings(max_examples=50, deadline=None)
@given(st.lists(st.sampled_from("abcde"), min_size=1, max_size=8), st.lists(st.sampled_from("abcde"), min_size=1,
                                                                          max_size=8), st.integers(1, 4))
def test_bleu_lies_in_unit_interval_and_is_one_for_identity(pred, label, k):
    score = ab.bleu(" ".join(pred), " ".join(label), k=k)
    assert 0.0 <= score <= 1.0 + 1e-12
    assert ab.bleu(" ".join(label), " ".join(label), k=k) == pytest.approx(1.0)


def test_vocab_from_all_counts_validation_tokens_like_d2l():
    data = ab.load_translation(batch_size=2, num_steps=5, num_train=4, num_val=2, min_freq=1, pairs=PAIRS,
                               verbose=False, vocab_from="all")
    assert data.tgt_vocab["bouge"] != 0
    with pytest.raises(ValueError, match="vocab_from must be 'train' or 'all', got 'val'"):
        ab.load_translation(pairs=PAIRS, vocab_from="val")


def test_bleu_parts_worked_example():
    """je suis chez chez moi . against je suis chez moi .: the second "chez" finds no unused match."""
    parts = ab.bleu_parts("je suis chez chez moi .", "je suis chez moi .")
    one, two = parts["orders"]
    assert one["matched"] == [True, True, True, False, True, True] and one["precision"] == 5 / 6
    assert two["grams"][2] == "chez chez" and two["precision"] == 4 / 5
    assert parts["penalty"] == 1.0
    assert ab.bleu("je suis chez chez moi .", "je suis chez moi .") == pytest.approx((5 / 6) ** 0.5 * (4 / 5) ** 0.25)
    short = ab.bleu_parts("je suis .", "je suis chez moi .")
    assert short["penalty"] == pytest.approx(math.exp(1 - 5 / 3))
    assert ab.bleu_parts("", "je") == {"penalty": 0.0, "orders": []}


def test_bleu_names_an_argument_that_is_not_a_string():
    with pytest.raises(TypeError, match="pred_seq must be a str .* got NoneType"):
        ab.bleu(None, "va !")
    with pytest.raises(TypeError, match="label_seq must be a str .* got NoneType"):
        ab.bleu("va !", None)
    with pytest.raises(TypeError, match=r"pred_seq .* got list .*' '\.join"):
        ab.bleu_parts(["va", "!"], "va !")
