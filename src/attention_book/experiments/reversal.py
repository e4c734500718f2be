"""Chapter 7's first experiment: reversing digit sequences with an encoder-only Transformer
(the task, the predictor, its attention maps), the warm-up experiment run on it, and a
bidirectional GRU of about the same size as the recurrent baseline."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from ..core.checks import check_int, check_positive_int
from ..core.train import accuracy, capped_batches, evaluating, model_device, warmup_cosine_schedule
from ..models.attention import record_attention
from ..models.transformer import TransformerEncoder, init_small_embeddings

__all__ = ["reverse_dataset", "reverse_loaders", "SequencePredictor", "reversal_attention_figure", "reversal_attention_profile", "warmup_experiment", "warmup_experiment_figure", "AdditiveSelfAttention", "token_loss",
           "RecurrentTagger", "accuracy_by_position"]


def reverse_dataset(num_samples: int, seq_len: int = 16, num_classes: int = 10, seed: int | None = None):
    """``TensorDataset`` of random digit sequences (num_samples, seq_len) and their reversals.

    ``seed`` fixes the digits; ``None`` (the default) uses the book's seed.
    """
    from torch.utils.data import TensorDataset

    from ..core.config import resolve_seed

    num_samples = check_positive_int("num_samples", num_samples)
    seq_len = check_positive_int("seq_len", seq_len)
    num_classes = check_int("num_classes", num_classes, minimum=2)
    gen = torch.Generator().manual_seed(resolve_seed(seed))
    X = torch.randint(num_classes, (num_samples, seq_len), generator=gen)
    return TensorDataset(X, X.flip(1))


def reverse_loaders(batch_size: int = 128, num_train: int = 50000, num_val: int = 1000, num_test: int = 10000,
                    seq_len: int = 16, num_classes: int = 10, seed: int | None = None):
    """Train (shuffled, full batches only), validation and test loaders for the reversal task.

    The three sets are drawn with ``seed``, ``seed + 1`` and ``seed + 2`` (and the
    batch order with ``seed``); ``None`` (the default) means the book's seed.
    """
    from torch.utils.data import DataLoader

    from ..core.config import resolve_seed

    batch_size = check_positive_int("batch_size", batch_size)
    seed = resolve_seed(seed)
    train = reverse_dataset(num_train, seq_len, num_classes, seed)
    val = reverse_dataset(num_val, seq_len, num_classes, seed + 1)
    test = reverse_dataset(num_test, seq_len, num_classes, seed + 2)
    gen = torch.Generator().manual_seed(seed)
    return (DataLoader(train, batch_size=batch_size, shuffle=True, drop_last=True, generator=gen),
            DataLoader(val, batch_size=batch_size), DataLoader(test, batch_size=batch_size))


class SequencePredictor(nn.Module):
    """Encoder-only Transformer that predicts one class per input position.

    ``SequencePredictor(num_classes, num_hiddens=32, num_heads=1, num_blks=1,
    ffn_num_hiddens=None, dropout=0.0, max_len=64, scoring='dot')``: a
    :class:`TransformerEncoder` over the input tokens (an embedding is the same
    as a one-hot vector times a dense layer), then a small output network
    (dense, layer norm, ReLU, dense) to ``num_classes`` scores at every position.
    ``ffn_num_hiddens`` defaults to ``2 * num_hiddens``. The embedding starts
    with entries of std ``1/sqrt(num_hiddens)`` so that, once scaled by
    ``sqrt(num_hiddens)``, it is as large as the positional encoding, which
    this task needs to see. ``scoring='additive'``
    swaps the scaled dot-product attention for :class:`AdditiveSelfAttention`.
    ``forward(X)``: (batch, length) ids -> (batch, length, num_classes).
    """

    def __init__(self, num_classes: int, num_hiddens: int = 32, num_heads: int = 1, num_blks: int = 1,
                 ffn_num_hiddens: int | None = None, dropout: float = 0.0, max_len: int = 64, scoring: str = "dot"):
        super().__init__()
        if scoring not in ("dot", "additive"):
            raise ValueError(f"scoring must be 'dot' or 'additive', got {scoring!r}")
        check_positive_int("num_classes", num_classes)
        if scoring == "additive" and check_positive_int("num_heads", num_heads) != 1:
            raise ValueError(f"scoring='additive' has a single head, got num_heads={num_heads}")
        attention = (lambda: AdditiveSelfAttention(num_hiddens, dropout)) if scoring == "additive" else None
        self.num_classes = num_classes
        self.encoder = TransformerEncoder(num_classes, num_hiddens, ffn_num_hiddens or 2 * num_hiddens, num_heads,
                                          num_blks, dropout, max_len=max_len, attention=attention)
        # Reversal is a task about positions only: with N(0, 1) token embeddings the positional
        # encoding would be hidden and training would stall near chance.
        init_small_embeddings(self.encoder.embedding)
        self.output_net = nn.Sequential(nn.Linear(num_hiddens, num_hiddens), nn.LayerNorm(num_hiddens), nn.ReLU(),
                                        nn.Dropout(dropout), nn.Linear(num_hiddens, num_classes))

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        return self.output_net(self.encoder(X))

    @torch.no_grad()
    def attention_maps(self, X: torch.Tensor) -> list[torch.Tensor]:
        """One (batch, heads, length, length) map per layer, from an eval-mode pass.

        ``X`` may sit on any device: it is moved to the model's, and the maps come
        back on the CPU, ready to plot.
        """
        with evaluating(self), record_attention(self) as maps:
            self(X.to(model_device(self)))
        return [m.float().cpu() for m in maps.tensors()]


def reversal_attention_figure(model: SequencePredictor, X: torch.Tensor, index: int = 0, figsize=(5.4, 4.7)):
    """The attention map of example ``index`` of ``X`` (batch, length), one plot per layer and head.

    Rows are query positions, columns key positions; the ticks show the
    position and the digit there (``position:digit``). A phone gets the map drawn again at the
    width of its column, ticks at their desktop size (a 390 px phone showed this figure at 76%,
    its 16 ``position:digit`` ticks about 9 px high; issue 36).
    """
    from ..core.plot import heatmaps_figure

    if not 0 <= index < X.shape[0]:
        raise ValueError(f"index must lie in 0..{X.shape[0] - 1}, got {index}")
    maps = torch.stack([m[0] for m in model.attention_maps(X[index:index + 1])])  # (layers, heads, n, n)
    ticks = [f"{i}:{d}" for i, d in enumerate(X[index].tolist())]

    def draw(size):
        return heatmaps_figure(maps, xlabel="key position : digit", ylabel="query position : digit",
                               titles=[f"head {h + 1}" for h in range(maps.shape[1])],
                               row_titles=[f"layer {i + 1}" for i in range(maps.shape[0])] if maps.shape[0] > 1
                               else None,
                               xticklabels=ticks, yticklabels=ticks, figsize=size, vmin=0.0)

    fig = draw(figsize)
    if maps.shape[0] * maps.shape[1] == 1:  # one map: a phone's column holds it at full size
        fig._ab_phone_drawing = lambda: draw(PHONE_MAP_SIZE)
    return fig


PHONE_MAP_SIZE = (3.35, 3.7)  # inches, at the phone's 100 dpi: one map as wide as a 390 px phone's column


@torch.no_grad()
def reversal_attention_profile(model: SequencePredictor, X: torch.Tensor, layer: int = -1) -> dict[str, float]:
    """Where the attention of a reversal model sits relative to the rule "query i reads key n-1-i".

    Takes the maps of block ``layer`` (default the last) for the sequences ``X``
    (batch, n), averaged over heads, and returns, over all sequences and query
    positions ``i``: ``'argmax_on_target'``, the fraction of rows whose largest
    weight is at key ``n-1-i``; ``'on_target'``, the mean weight on that key;
    ``'on_neighbours'``, the mean weight on keys ``n-1-i ± 1`` together.
    """
    maps = model.attention_maps(X)[layer].mean(dim=1)  # (batch, n, n)
    n = maps.shape[-1]
    rows = torch.arange(n, device=maps.device)
    target = rows.flip(0)
    neighbours = torch.zeros_like(maps[0], dtype=torch.bool)
    for shift in (-1, 1):
        cols = target + shift
        ok = (cols >= 0) & (cols < n)
        neighbours[rows[ok], cols[ok]] = True
    return {
        "argmax_on_target": (maps.argmax(dim=-1) == target).float().mean().item(),
        "on_target": maps[:, rows, target].mean().item(),
        "on_neighbours": (maps * neighbours).sum(dim=-1).mean().item(),
    }


def warmup_experiment(lrs=(3e-3, 3e-2), warmups=(0, 50), num_seeds: int = 4, epochs: int = 3,
                      num_train: int = 12_800, num_blks: int = 1, seed: int | None = None) -> list[dict]:
    """Train the post-norm reversal model with and without warm-up, for several rates and seeds.

    For every peak rate in ``lrs``, warm-up length in ``warmups`` (0: none) and
    seed ``seed + k`` (k < ``num_seeds``; ``seed`` ``None`` is the book's seed), a
    :class:`SequencePredictor` (one head, ``num_blks`` post-norm blocks, d = 32)
    is trained for ``epochs`` epochs on ``num_train`` sequences with Adam, the
    warm-up + cosine schedule and gradient clipping at 5: the chapter's recipe at
    a shorter budget, the same for every run. A seed fixes the data, the initial
    weights and the batch order, so the runs of one seed differ only in their
    schedule. Returns one dict per run: ``lr``, ``warmup``, ``seed``,
    ``val_accuracy`` (after every epoch) and ``train_loss`` (per epoch).
    """
    from ..core.config import resolve_seed, seed_everything
    from ..core.train import fit

    lrs = [float(lr) for lr in lrs]
    if not lrs or any(not math.isfinite(lr) or lr <= 0 for lr in lrs):
        raise ValueError(f"lrs must be a non-empty list of positive rates, got {lrs}")
    warmups = [check_int("warmups", w, minimum=0) for w in warmups]
    if not warmups:
        raise ValueError("warmups must name at least one warm-up length (0 for none)")
    num_seeds, epochs = check_positive_int("num_seeds", num_seeds), check_positive_int("epochs", epochs)
    first = resolve_seed(seed)
    rows = []
    for k in range(num_seeds):
        train, val, _ = reverse_loaders(128, num_train=num_train, num_val=1000, num_test=1, seed=first + k)
        max_steps = epochs * len(train)
        for lr in lrs:
            for warmup in warmups:
                seed_everything(first + k)
                model = SequencePredictor(10, 32, num_heads=1, num_blks=num_blks)
                optimizer = torch.optim.Adam(model.parameters(), lr=lr)
                scheduler = warmup_cosine_schedule(optimizer, min(warmup, max_steps), max_steps)
                history = fit(model, train, token_loss, epochs=epochs, optimizer=optimizer, scheduler=scheduler,
                              clip_grad=5.0, progress=False,
                              evaluate=lambda m: {"val accuracy": accuracy(m, val)})
                rows.append({"lr": lr, "warmup": warmup, "seed": first + k,
                             "val_accuracy": list(history.metrics["val accuracy"]),
                             "train_loss": list(history.train_loss)})
    return rows


def warmup_experiment_figure(rows: list[dict], figsize=(6.0, 3.2)):
    """Final validation accuracy of every run of :func:`warmup_experiment`, one dot per seed.

    One column of dots per (peak rate, warm-up) setting, so the spread over
    seeds is visible; the dashed line is chance (one class in ten).
    """
    import matplotlib.pyplot as plt

    from ..core.plot import ensure_style, chance_line

    if not rows:
        raise ValueError("rows is empty: pass the list that warmup_experiment returns")
    settings = sorted({(r["lr"], r["warmup"]) for r in rows})
    ensure_style()
    fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    for x, (lr, warmup) in enumerate(settings):
        finals = [r["val_accuracy"][-1] for r in rows if (r["lr"], r["warmup"]) == (lr, warmup)]
        offsets = torch.linspace(-0.12, 0.12, len(finals)).tolist() if len(finals) > 1 else [0.0]
        ax.scatter([x + o for o in offsets], finals, s=36, color="C0" if warmup else "C1", zorder=3)
    chance_line(ax, 0.1)
    ax.set_xticks(range(len(settings)))
    ax.set_xticklabels([f"peak {lr:g}\n" + (f"warm-up {w}" if w else "no warm-up") for lr, w in settings])
    ax.set_ylim(0.0, 1.05)
    ax.set_ylabel("validation accuracy")
    ax.set_title("Post-norm reversal model, same budget, one dot per seed")
    return fig


class AdditiveSelfAttention(nn.Module):
    """A one-head attention sublayer scored additively, as a drop-in for ``MultiHeadAttention``.

    Values are projected by ``W_v``, weighted by :class:`~attention_book.AdditiveAttention`
    (score ``wᵀ tanh(W_q q + W_k k)``) and mixed by ``W_o``. Accepts the same
    ``forward(queries, keys, values, valid_lens=None, *, attn_mask=None,
    causal=False)``; ``attention_weights`` is (batch, 1, queries, keys).
    """

    def __init__(self, num_hiddens: int, dropout: float = 0.0):
        super().__init__()
        from ..models.attention import AdditiveAttention

        self.attention = AdditiveAttention(num_hiddens, dropout, query_size=num_hiddens, key_size=num_hiddens)
        self.W_v = nn.Linear(num_hiddens, num_hiddens, bias=False)
        self.W_o = nn.Linear(num_hiddens, num_hiddens, bias=False)

    @property
    def attention_weights(self) -> torch.Tensor | None:
        w = self.attention.attention_weights
        return None if w is None else w.unsqueeze(1)

    def forward(self, queries, keys, values, valid_lens=None, *, attn_mask=None, causal: bool = False):
        from ..models.attention import causal_mask, key_mask

        b, n_q, n_k = queries.shape[0], queries.shape[1], keys.shape[1]
        mask = key_mask(valid_lens, b, n_q, n_k, device=queries.device)
        for extra in (attn_mask, causal_mask(n_q, n_k, device=queries.device) if causal else None):
            if extra is not None:
                mask = extra.expand(b, n_q, n_k) if mask is None else mask & extra
        return self.W_o(self.attention(queries, keys, self.W_v(values), mask))


def token_loss(model: nn.Module, batch) -> tuple[torch.Tensor, int]:
    """``loss_fn`` for ``ab.fit`` on (inputs, labels) batches: cross-entropy over every position."""
    X, Y = batch
    logits = model(X)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), Y.reshape(-1)), Y.numel()


class RecurrentTagger(nn.Module):
    """A bidirectional GRU that predicts one class per input position: the recurrent baseline.

    ``RecurrentTagger(num_classes, num_hiddens=32)``: an embedding of size
    ``num_hiddens`` (as the chapter's own class), one bidirectional
    ``nn.GRU`` layer with ``num_hiddens`` units per direction, and the output
    network of :class:`SequencePredictor` (dense from the two directions' ``2 *
    num_hiddens`` to ``num_hiddens``, layer norm, ReLU, dense) to ``num_classes``
    scores at every position. Position ``i`` sees the whole sequence: inputs
    ``0..i`` through the forward direction, ``i..n-1`` through the backward one;
    to output the digit at ``n-1-i`` it must carry it through ``|n-1-2i|``
    recurrent steps. ``num_hiddens=26`` gives about the parameter count of the
    chapter's one-block one-head ``SequencePredictor`` with d = 32.
    ``forward(X)``: (batch, length) ids -> (batch, length, num_classes).
    """

    def __init__(self, num_classes: int, num_hiddens: int = 32):
        super().__init__()
        self.num_classes = check_positive_int("num_classes", num_classes)
        num_hiddens = check_positive_int("num_hiddens", num_hiddens)
        self.embedding = nn.Embedding(num_classes, num_hiddens)
        self.rnn = nn.GRU(num_hiddens, num_hiddens, batch_first=True, bidirectional=True)
        self.output_net = nn.Sequential(nn.Linear(2 * num_hiddens, num_hiddens), nn.LayerNorm(num_hiddens),
                                        nn.ReLU(), nn.Linear(num_hiddens, num_classes))

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        outputs, _ = self.rnn(self.embedding(X))
        return self.output_net(outputs)


@torch.no_grad()
def accuracy_by_position(model: nn.Module, batches) -> torch.Tensor:
    """Share of right arg-max predictions at every output position, over ``(inputs, labels)`` batches.

    Labels are (batch, n); returns a float tensor of shape (n,) on the CPU. Like ``ab.accuracy``,
    it reads only the first ``ATTENTION_BOOK_MAX_STEPS`` batches when that cap is set (smoke runs).
    """
    device = model_device(model)
    right, total = None, 0
    with evaluating(model):
        for X, Y in capped_batches(batches):
            hits = (model(X.to(device)).argmax(dim=-1) == Y.to(device)).sum(dim=0).cpu()
            right = hits if right is None else right + hits
            total += Y.shape[0]
    if right is None:
        raise ValueError("accuracy_by_position got no batches")
    return right.double().div(total).float()
