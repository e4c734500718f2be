"""Sequence-to-sequence learning: RNN encoder–decoders, Bahdanau attention, decoding.

The model interface every decoding helper here relies on (the chapter-7
Transformer follows it too):

* ``model(src, tgt_input, src_valid_len) -> logits`` of shape
  (batch, tgt_steps, tgt_vocab): the teacher-forced pass used in training
  (:func:`translation_loss`).
* ``model.encoder(src, src_valid_len) -> enc_all_outputs`` (anything).
* ``model.decoder.init_state(enc_all_outputs, src_valid_len) -> state``.
* ``model.decoder(tgt_step, state) -> (logits, state)`` where ``tgt_step`` is
  (batch, 1), the newest token only: the decoder keeps whatever it needs about
  earlier tokens inside ``state`` (an RNN hidden state, a key/value cache, …).
* Every tensor in ``state`` (nested in tuples, lists or dicts; ``None`` allowed)
  has the batch on axis 0, so beam search can pick and repeat hypotheses with
  ``index_select(0, …)``. A decoder whose state does not follow that rule
  defines ``reorder_state(state, index)`` itself.
* Optionally ``model.decoder.attention_weights``: read after every step when the
  caller asks for attention maps.

Shapes follow d2l's names but are **batch-first** everywhere: source and target
tokens (batch, num_steps), encoder outputs (batch, num_steps, num_hiddens), RNN
hidden states stored as (batch, num_layers, num_hiddens).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from .attention import AdditiveAttention, DotProductAttention, keep_attention_weights
from ..core.checks import (check_dropout, check_optional_positive_int, check_positive_int, check_same_device,
                     check_token_ids)
from ..data.text import BOS, EOS, bleu
from ..core.train import evaluating, model_device

__all__ = [
    "Encoder",
    "Decoder",
    "AttentionDecoder",
    "EncoderDecoder",
    "init_seq2seq",
    "Seq2SeqEncoder",
    "Seq2SeqDecoder",
    "Seq2SeqAttentionDecoder",
    "make_seq2seq",
    "masked_cross_entropy",
    "translation_loss",
    "reorder_state",
    "greedy",
    "cut_at_eos",
    "greedy_search",
    "beam_search",
    "Translation",
    "translate",
]


# --- interfaces ---------------------------------------------------------------------------

class Encoder(nn.Module):
    """Base encoder: ``forward(X, valid_len) -> enc_all_outputs``."""

    # source tokens X (batch, num_steps) -> whatever the decoder will need from them
    def forward(self, X, valid_len=None):
        raise NotImplementedError


class Decoder(nn.Module):
    """Base decoder: ``init_state(enc_all_outputs, valid_len)`` then ``forward(X, state) -> (logits, state)``."""

    # once per source: the encoder's outputs -> the decoder's first state
    def init_state(self, enc_all_outputs, valid_len=None):
        raise NotImplementedError

    # target tokens X (batch, steps) and the state before them
    # -> (logits, the state after them)
    def forward(self, X, state):
        raise NotImplementedError


class AttentionDecoder(Decoder):
    """A decoder that exposes the attention weights of its last forward pass."""

    @property
    def attention_weights(self):
        raise NotImplementedError


class EncoderDecoder(nn.Module):
    """Glue: encode the source, start the decoder from it, decode the (teacher-forced) target."""

    def __init__(self, encoder: nn.Module, decoder: nn.Module):
        super().__init__()
        self.encoder, self.decoder = encoder, decoder

    def forward(self, src, tgt_input, src_valid_len=None):
        # everything the encoder read from the source
        enc_all_outputs = self.encoder(src, src_valid_len)
        # what the decoder starts from
        state = self.decoder.init_state(enc_all_outputs, src_valid_len)
        # teacher forcing: every target step in one call
        logits, _ = self.decoder(tgt_input, state)
        return logits


def init_seq2seq(module: nn.Module) -> None:
    """Xavier-uniform initialisation of linear and recurrent weight matrices (as d2l does)."""
    if isinstance(module, nn.Linear):
        nn.init.xavier_uniform_(module.weight)
    elif isinstance(module, (nn.GRU, nn.LSTM)):
        for name, param in module.named_parameters():
            if name.startswith("weight"):
                nn.init.xavier_uniform_(param)


_CELLS = {"gru": nn.GRU, "lstm": nn.LSTM}


def _rnn(cell: str, input_size: int, num_hiddens: int, num_layers: int, dropout: float) -> nn.Module:
    """A batch-first GRU or LSTM; ``dropout`` acts between layers (so not with one layer)."""
    key = str(cell).lower()
    if key not in _CELLS:
        raise ValueError(f"cell must be one of {sorted(_CELLS)}, got {cell!r}")
    return _CELLS[key](input_size, num_hiddens, num_layers, dropout=dropout if num_layers > 1 else 0.0,
                       batch_first=True)


def _checked_embedding(vocab_size: int, embed_size: int, num_hiddens: int, num_layers: int,
                       dropout: float) -> nn.Embedding:
    """The token embedding of an RNN encoder or decoder, once the sizes they all take are checked:
    positive integers, and a dropout in [0, 1)."""
    for name, value in (("vocab_size", vocab_size), ("embed_size", embed_size),
                        ("num_hiddens", num_hiddens), ("num_layers", num_layers)):
        check_positive_int(name, value)
    check_dropout(dropout)
    return nn.Embedding(vocab_size, embed_size)


def _check_input(name: str, X, module: nn.Module) -> None:
    """Token ids (batch, num_steps) on the device of ``module``'s parameters."""
    check_token_ids(name, X)
    check_same_device(name, X, module)


# RNN hidden states are (num_layers, batch, h) in PyTorch; decoder states keep them
# batch-first, (batch, num_layers, h), so every state tensor has the batch on axis 0.
def _batch_first(hidden):
    if isinstance(hidden, tuple):
        return tuple(h.transpose(0, 1) for h in hidden)
    return hidden.transpose(0, 1)


def _layer_first(hidden):
    if isinstance(hidden, tuple):
        return tuple(h.transpose(0, 1).contiguous() for h in hidden)
    return hidden.transpose(0, 1).contiguous()


def _top_hidden(hidden):
    """The last layer's hidden state (batch, h) from a batch-first GRU or LSTM state."""
    h = hidden[0] if isinstance(hidden, tuple) else hidden
    return h[:, -1]


# --- encoder and decoders -----------------------------------------------------------------


class Seq2SeqEncoder(Encoder):
    """Embedding + multi-layer GRU (or LSTM) reading the source.

    ``forward(X, valid_len=None)`` with X (batch, num_steps) returns
    ``(outputs, hidden)``: the last layer's state at every step,
    (batch, num_steps, num_hiddens), and every layer's final state, batch-first
    (batch, num_layers, num_hiddens) — a pair of those for an LSTM.
    ``valid_len`` is accepted for the interface; padding comes after the real
    tokens, so the attention mask (not the encoder) keeps it out of the result.
    """

    def __init__(self, vocab_size: int, embed_size: int, num_hiddens: int,
                 num_layers: int, dropout: float = 0.0, cell: str = "gru"):
        super().__init__()
        sizes = (vocab_size, embed_size, num_hiddens, num_layers, dropout)
        self.embedding = _checked_embedding(*sizes)
        self.cell = str(cell).lower()
        self.rnn = _rnn(cell, embed_size, num_hiddens, num_layers, dropout)
        self.apply(init_seq2seq)

    def forward(self, X, valid_len=None):
        _check_input("X", X, self)
        # h_t = f(x_t, h_{t-1}) for t = 1..T: outputs holds the last layer's h_t
        # at every t, hidden the final h_T of every layer
        outputs, hidden = self.rnn(self.embedding(X))
        return outputs, _batch_first(hidden)


class Seq2SeqDecoder(Decoder):
    """The plain RNN decoder of Sutskever et al.: one fixed context vector.

    The context is the encoder's last-layer final state; it is concatenated
    with every target embedding. State: ``(context, hidden)``.
    """

    def __init__(self, vocab_size: int, embed_size: int, num_hiddens: int,
                 num_layers: int, dropout: float = 0.0, cell: str = "gru"):
        super().__init__()
        sizes = (vocab_size, embed_size, num_hiddens, num_layers, dropout)
        self.embedding = _checked_embedding(*sizes)
        self.cell = str(cell).lower()
        self.rnn = _rnn(
            cell, embed_size + num_hiddens, num_hiddens, num_layers, dropout
        )
        self.dense = nn.Linear(num_hiddens, vocab_size)
        self.apply(init_seq2seq)

    def init_state(self, enc_all_outputs, valid_len=None):
        _, hidden = enc_all_outputs
        # c = h_T (the last layer's final state), and s_0 = the encoder's final states
        return (_top_hidden(hidden), hidden)

    def forward(self, X, state):
        _check_input("X", X, self)
        context, hidden = state
        emb = self.embedding(X)  # e(y_{t'-1}): (batch, steps, embed)
        # the same c at every step t'
        ctx = context.unsqueeze(1).expand(-1, emb.shape[1], -1)
        # s_{t'} = g([e(y_{t'-1}); c], s_{t'-1}) for every step t' at once
        outputs, new_hidden = self.rnn(
            torch.cat((emb, ctx), dim=-1), _layer_first(hidden)
        )
        logits = self.dense(outputs)  # scores from every s_{t'}: (batch, steps, vocab)
        return logits, (context, _batch_first(new_hidden))


class Seq2SeqAttentionDecoder(AttentionDecoder):
    """RNN decoder with attention over the encoder outputs (Bahdanau et al., 2014).

    At decoding step t' the query is the decoder's last-layer hidden state
    s_{t'-1}; keys and values are the encoder outputs h_1..h_T (padding masked
    by the source valid lengths). The context c_{t'} is concatenated with the
    embedding of the current input token and fed to the RNN.

    ``attention="additive"`` (the paper's scoring function) or ``"dot"``
    (scaled dot-product; exercise 11.4.2). ``cell="gru"`` or ``"lstm"``
    (exercise 11.4.1). State: ``(enc_outputs, hidden, enc_valid_len)``, all
    batch-first. After a forward pass, :attr:`attention_weights` is a list with
    one (batch, 1, num_src_steps) tensor per target step (``None`` entries when
    the fast dot-product kernel ran in training).
    """

    def __init__(self, vocab_size: int, embed_size: int, num_hiddens: int,
                 num_layers: int, dropout: float = 0.0, cell: str = "gru",
                 attention: str = "additive"):
        super().__init__()
        self.cell, self.attention_kind = str(cell).lower(), str(attention).lower()
        if self.attention_kind == "additive":  # a(s, h) = w_v^T tanh(W_q s + W_k h)
            self.attention = AdditiveAttention(
                num_hiddens, dropout, query_size=num_hiddens, key_size=num_hiddens
            )
        elif self.attention_kind == "dot":
            self.attention = DotProductAttention(dropout)
        else:
            raise ValueError(
                f"attention must be 'additive' or 'dot', got {attention!r}"
            )
        # the decoder's state queries the encoder's outputs
        self.attention.role = "cross"
        # after the attention, as always: the modules draw their initial weights
        # in the same order
        self.embedding = _checked_embedding(
            vocab_size, embed_size, num_hiddens, num_layers, dropout
        )
        self.rnn = _rnn(
            cell, embed_size + num_hiddens, num_hiddens, num_layers, dropout
        )
        self.dense = nn.Linear(num_hiddens, vocab_size)
        self._attention_weights: list = []
        self.apply(init_seq2seq)

    def init_state(self, enc_all_outputs, valid_len=None):
        enc_outputs, hidden = enc_all_outputs
        # keys and values h_1..h_T, s_0 = the encoder's final states, source lengths
        return (enc_outputs, hidden, valid_len)

    def forward(self, X, state):
        _check_input("X", X, self)
        enc_outputs, hidden, enc_valid_len = state
        emb = self.embedding(X)  # e(y_{t'-1}): (batch, steps, embed)
        hidden = _layer_first(hidden)
        outputs, self._attention_weights = [], []
        for step in range(emb.shape[1]):  # one output step t' at a time
            top = hidden[0][-1] if isinstance(hidden, tuple) else hidden[-1]
            query = top.unsqueeze(1)  # the query s_{t'-1}, last layer: (batch, 1, d)
            # c_{t'} = sum_t alpha(s_{t'-1}, h_t) h_t, padding masked: (batch, 1, d)
            context = self.attention(query, enc_outputs, enc_outputs, enc_valid_len)
            # [c_{t'}; e(y_{t'-1})]
            step_in = torch.cat((context, emb[:, step : step + 1]), dim=-1)
            # s_{t'} = g([c_{t'}; e(y_{t'-1})], s_{t'-1})
            out, hidden = self.rnn(step_in, hidden)
            outputs.append(out)
            self._attention_weights.append(self.attention.attention_weights)
        # scores from every s_{t'}: (batch, steps, vocab)
        logits = self.dense(torch.cat(outputs, dim=1))
        return logits, (enc_outputs, _batch_first(hidden), enc_valid_len)

    @property
    def attention_weights(self) -> list:
        return self._attention_weights


def make_seq2seq(src_vocab_size: int, tgt_vocab_size: int, embed_size: int = 256, num_hiddens: int = 256,
                 num_layers: int = 2, dropout: float = 0.2, cell: str = "gru",
                 attention: str | None = "additive") -> EncoderDecoder:
    """An encoder–decoder: ``attention=None`` gives the plain fixed-context model."""
    encoder = Seq2SeqEncoder(src_vocab_size, embed_size, num_hiddens, num_layers, dropout, cell)
    if attention is None:
        decoder = Seq2SeqDecoder(tgt_vocab_size, embed_size, num_hiddens, num_layers, dropout, cell)
    else:
        decoder = Seq2SeqAttentionDecoder(tgt_vocab_size, embed_size, num_hiddens, num_layers, dropout, cell,
                                          attention)
    return EncoderDecoder(encoder, decoder)


# --- loss -------------------------------------------------------------------------------------

def masked_cross_entropy(logits: torch.Tensor, labels: torch.Tensor, pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy averaged over the real (non-``<pad>``) label tokens.

    ``logits`` (batch, steps, vocab), ``labels`` (batch, steps). Returns
    ``(mean, count)``: the mean over unpadded tokens and how many there were,
    the pair :func:`attention_book.fit` uses to average epochs correctly.
    Positions whose label is ``pad_id`` contribute nothing, whatever the logits.
    A batch of padding only gives a loss of 0 (with count 0).
    """
    if logits.dim() != 3 or labels.shape != logits.shape[:2]:
        raise ValueError(
            f"logits must be (batch, steps, vocab) and labels (batch, steps); got logits {tuple(logits.shape)} "
            f"and labels {tuple(labels.shape)}"
        )
    per_token = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), reduction="none")
    mask = (labels.reshape(-1) != pad_id).to(per_token.dtype)
    count = mask.sum()
    return (per_token * mask).sum() / count.clamp(min=1), count


def translation_loss(pad_id: int) -> Callable:
    """A ``loss_fn(model, batch)`` for :func:`attention_book.fit` on translation batches.

    ``batch = (src, tgt_input, src_valid_len, tgt_label)``; the model is called
    as ``model(src, tgt_input, src_valid_len)`` (teacher forcing).
    """

    def loss_fn(model, batch):
        src, tgt_input, src_valid_len, label = batch
        return masked_cross_entropy(model(src, tgt_input, src_valid_len), label, pad_id)

    return loss_fn


# --- decoding ---------------------------------------------------------------------------------

def reorder_state(decoder: nn.Module, state: Any, index: torch.Tensor) -> Any:
    """Pick rows ``index`` (along the batch axis 0) of every tensor in a decoder state.

    Uses ``decoder.reorder_state(state, index)`` when the decoder defines it.
    """
    custom = getattr(decoder, "reorder_state", None)
    if custom is not None:
        return custom(state, index)

    def pick(s):
        if isinstance(s, torch.Tensor):
            return s.index_select(0, index.to(s.device)) if s.dim() > 0 else s
        if isinstance(s, tuple):
            return tuple(pick(v) for v in s)
        if isinstance(s, list):
            return [pick(v) for v in s]
        if isinstance(s, dict):
            return {k: pick(v) for k, v in s.items()}
        return s

    return pick(state)


def _snapshot(weights):
    """A detached copy of whatever attention weights a decoder exposes."""
    if isinstance(weights, torch.Tensor):
        return weights.detach().clone()
    if isinstance(weights, (list, tuple)):
        return type(weights)(_snapshot(w) for w in weights)
    return weights


@torch.no_grad()
def greedy(decoder: nn.Module, state: Any, prefix: torch.Tensor, max_steps: int, eos_id: int | None = None,
           use_cache: bool = True, after_step: Callable[[], None] | None = None) -> tuple[torch.Tensor, Any]:
    """Greedy decoding with any decoder ``forward(X, state) -> (logits, state)``: feed back the most likely token.

    ``state`` is the decoder's state before ``prefix`` (batch, n): ``<bos>`` for a
    translation, a prompt for a language model. With ``use_cache`` the prefix runs
    once and then each new token alone, the decoder keeping what it needs about the
    earlier ones in its state (an RNN's hidden state, a Transformer's key/value
    cache). Without, every step runs the decoder from ``state`` over the whole
    sequence so far. Stops after ``max_steps`` tokens, or once every row has
    produced ``eos_id``; ``after_step()`` runs after each step. Returns the new
    tokens (batch, steps run) and the state after them (``state`` itself without the cache).
    Call it in eval mode (:func:`attention_book.evaluating`).
    """
    max_steps = check_positive_int("max_steps", max_steps)
    seq, X, new = prefix, prefix, []
    finished = torch.zeros(prefix.shape[0], dtype=torch.bool, device=prefix.device)
    for _ in range(max_steps):
        if use_cache:
            logits, state = decoder(X, state)
        else:
            logits, _ = decoder(seq, state)
        X = logits[:, -1:].argmax(dim=-1)
        new.append(X)
        if not use_cache:
            seq = torch.cat((seq, X), dim=1)
        if after_step is not None:
            after_step()
        if eos_id is not None:
            finished |= X[:, 0] == eos_id
            if bool(finished.all()):
                break
    return torch.cat(new, dim=1), state


def cut_at_eos(tokens: torch.Tensor, eos_id: int) -> list[list[int]]:
    """Each row of ``tokens`` as a list of ids up to (without) its first ``eos_id``."""
    return [row[: row.index(eos_id)] if eos_id in row else row for row in tokens.tolist()]


@torch.no_grad()
def greedy_search(model: nn.Module, src: torch.Tensor, src_valid_len: torch.Tensor | None, bos_id: int,
                  eos_id: int, max_steps: int, save_attention: bool = False, use_cache: bool = True):
    """Greedy decoding of an encoder–decoder (:func:`greedy` after ``<bos>``, from the encoded source).

    Returns ``(tokens, attention)``: ``tokens[b]`` is the list of predicted
    token ids of example ``b`` *without* ``<eos>`` (decoding of an example stops
    at its first ``<eos>``, and the loop stops when every example has stopped or
    after ``max_steps`` tokens); ``attention`` is a list with one entry per step
    run, each a copy of ``model.decoder.attention_weights`` after that step
    (empty unless ``save_attention``). ``use_cache=False`` re-runs the decoder over
    the whole prefix at every step (the same tokens, slower). Runs in eval mode.
    """
    check_token_ids("src", src)
    attention: list = []

    def keep():
        attention.append(_snapshot(getattr(model.decoder, "attention_weights", None)))

    with evaluating(model), (keep_attention_weights() if save_attention else contextlib.nullcontext()):
        state = model.decoder.init_state(model.encoder(src, src_valid_len), src_valid_len)
        bos = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
        tokens, _ = greedy(model.decoder, state, bos, max_steps, eos_id, use_cache, keep if save_attention else None)
    return cut_at_eos(tokens, eos_id), attention


@torch.no_grad()
def beam_search(model: nn.Module, src: torch.Tensor, src_valid_len: torch.Tensor | None, bos_id: int,
                eos_id: int, max_steps: int, beam_size: int = 4, alpha: float = 0.75) -> list[list[int]]:
    """Beam search: keep the ``beam_size`` most probable prefixes at every step.

    Each example is decoded on its own, its ``beam_size`` hypotheses forming
    the decoder's batch. A hypothesis ends at ``<eos>`` (or after ``max_steps``
    tokens); among finished ones the best by ``log p / L**alpha`` wins (``L``
    its length counting ``<eos>``; ``alpha=0`` is the plain probability, which
    favours short outputs). With ``beam_size=1`` this is greedy decoding.
    Returns the token ids of each example, without ``<eos>``.
    """
    check_token_ids("src", src)
    beam_size = check_positive_int("beam_size", beam_size)
    max_steps = check_positive_int("max_steps", max_steps)
    results = []
    with evaluating(model):
        for b in range(src.shape[0]):
            one = torch.tensor([b], device=src.device)
            src_b = src.index_select(0, one)
            len_b = None if src_valid_len is None else src_valid_len.index_select(0, one)
            state = model.decoder.init_state(model.encoder(src_b, len_b), len_b)
            prefixes: list[list[int]] = [[]]
            scores = torch.zeros(1, device=src.device)
            last = torch.full((1, 1), bos_id, dtype=torch.long, device=src.device)
            done: list[tuple[float, list[int]]] = []
            for step in range(max_steps):
                logits, state = model.decoder(last, state)
                logp = F.log_softmax(logits[:, -1].float(), dim=-1)  # (hyps, vocab)
                total = (scores[:, None] + logp).reshape(-1)
                # Look at twice the beam, so hypotheses ending here do not shrink it.
                top, flat = total.topk(min(2 * beam_size, total.numel()))
                vocab = logp.shape[-1]
                parent, token = flat // vocab, flat % vocab
                keep_parent, keep_token, keep_score = [], [], []
                for s, p, t in zip(top.tolist(), parent.tolist(), token.tolist()):
                    if len(keep_parent) == beam_size:
                        break
                    if t == eos_id:
                        done.append((s / (len(prefixes[p]) + 1) ** alpha, prefixes[p]))
                    else:
                        keep_parent.append(p)
                        keep_token.append(t)
                        keep_score.append(s)
                # Stop when no live hypothesis can still beat the best finished one.
                if not keep_parent or len(done) >= beam_size:
                    break
                if step == max_steps - 1:
                    for s, p, t in zip(keep_score, keep_parent, keep_token):
                        done.append((s / (len(prefixes[p]) + 1) ** alpha, prefixes[p] + [t]))
                    break
                index = torch.tensor(keep_parent, device=src.device)
                state = reorder_state(model.decoder, state, index)
                prefixes = [prefixes[p] + [t] for p, t in zip(keep_parent, keep_token)]
                scores = torch.tensor(keep_score, device=src.device)
                last = torch.tensor(keep_token, device=src.device).unsqueeze(1)
            results.append(max(done, key=lambda d: d[0])[1] if done else [])
    return results


# --- translating and scoring -----------------------------------------------------------------

@dataclass
class Translation:
    """One translated sentence: the source, the tokens produced, and (if asked) attention."""

    source: str
    tokens: list[str]
    reference: str | None = None
    bleu: float | None = None
    attention: torch.Tensor | None = None  # (output steps incl. <eos>, source steps)

    @property
    def text(self) -> str:
        return " ".join(self.tokens)


def translate(model: nn.Module, data, sentences: Sequence[str], references: Sequence[str] | None = None,
              beam_size: int | None = None, max_steps: int | None = None, k: int = 2,
              save_attention: bool = False) -> list[Translation]:
    """Translate raw English sentences with a trained model and the vocabularies of ``data``.

    ``data`` is a :class:`attention_book.data.text.TranslationData`; sentences are
    preprocessed as in training (unknown words become ``<unk>``, sentences longer
    than ``num_steps`` are trimmed, an empty sentence is just ``<eos>``).
    ``beam_size=None`` decodes greedily, otherwise with :func:`beam_search`.
    With ``references`` each translation gets its BLEU (up to ``k``-grams). With
    ``save_attention`` (greedy only) each gets its attention matrix: one row per
    output step (the last row is the step that produced ``<eos>``, if it did),
    one column per source position.
    """
    if references is not None and len(references) != len(sentences):
        raise ValueError(f"got {len(sentences)} sentences but {len(references)} references")
    beam_size = check_optional_positive_int("beam_size", beam_size)
    max_steps = check_optional_positive_int("max_steps", max_steps)
    if save_attention and beam_size is not None:
        raise ValueError("save_attention works with greedy decoding only (beam_size=None)")
    if len(sentences) == 0:
        return []
    dev = model_device(model)
    src, _, src_valid_len, _ = data.build(list(sentences), list(references) if references is not None else None)
    src, src_valid_len = src.to(dev), src_valid_len.to(dev)
    tgt_vocab = data.tgt_vocab
    steps = data.num_steps if max_steps is None else max_steps
    bos_id, eos_id = tgt_vocab[BOS], tgt_vocab[EOS]
    attention = []
    if beam_size is None:
        ids, attention = greedy_search(model, src, src_valid_len, bos_id, eos_id, steps, save_attention)
    else:
        ids = beam_search(model, src, src_valid_len, bos_id, eos_id, steps, beam_size)
    out = []
    for b, sentence in enumerate(sentences):
        tokens = tgt_vocab.to_tokens(ids[b])
        item = Translation(sentence, tokens)
        if references is not None:
            item.reference = references[b]
            item.bleu = bleu(item.text, references[b], k=k) if tokens else 0.0
        if save_attention and attention and isinstance(attention[0], list):
            rows = [step[-1][b, 0] for step in attention[: len(tokens) + 1] if step and step[-1] is not None]
            if rows:
                item.attention = torch.stack(rows).cpu()
        out.append(item)
    return out


# --- training and comparing ---------------------------------------------------------------------


