"""Chapter 10's experiments on long inputs: positions beyond the training length, local and linear attention.

**The task.** :func:`latest_marker_task` draws sequences of tokens, about one
in five of them a *marker* (ids ``0 .. num_markers - 1``); the label at
position ``i`` is the latest marker at or before ``i`` (positions before the
first marker have no label, ``-100``). Solving it takes both content (which
tokens are markers) and relative position (which marker is the latest), and
the rule is the same at every length — so a model trained on short sequences
*could* solve longer ones; whether it does depends on how it was told about
positions.

**The model.** :class:`LengthModel` is a small causal Transformer (pre-norm
blocks of chapter 7) with one of four position schemes: ``'sinusoidal'`` and
``'learned'`` add a vector per position to the input, ``'rotary'`` rotates
queries and keys, ``'alibi'`` penalises scores by distance. ``window=w`` lets
each position see only the ``w`` latest positions; ``attention='linear'``
swaps softmax attention for :class:`LinearAttention`; ``num_kv_heads`` shares
key/value heads (multi-query and grouped-query attention).

**Local and linear attention**, written to cost time and memory linear in the
length: :func:`sliding_window_attention` (blocks of ``window`` queries against
their own and the previous block of keys) and :func:`linear_attention`
(a kernel feature map φ replaces ``exp(q·k)``, so that the sum over keys can
be computed once, chunk by chunk). :func:`feature_nadaraya_watson` ties the
feature-map idea back to chapter 2's Gaussian kernel (random Fourier features,
Rahimi and Recht, 2007).
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Callable, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from ..models.attention import MultiHeadAttention, check_projection_inputs, attend, record_attention, transpose_qkv
from ..models.transformer import init_small_embeddings
from ..core.plot import plain_number  # a module-level tick formatter: the figure can be pickled for its phone copy
from ..models.attention_variants import ALiBiAttention, GroupedQueryAttention, RotaryAttention
from ..core.checks import check_int, check_kv_heads, check_optional_positive_int, check_positive_int, check_same_device
from ..core.config import resolve_seed
from ..models.positional import LearnedPositionalEmbedding, PositionalEncoding
from ..core.train import IGNORE, evaluating, fit

__all__ = [
    "POSITION_SCHEMES",
    "latest_marker_task",
    "LengthModel",
    "LinearAttention",
    "train_length_model",
    "length_accuracy",
    "length_curves_figure",
    "length_attention_figure",
    "latest_marker_focus",
    "sliding_window_attention",
    "elu_feature_map",
    "linear_attention",
    "random_fourier_features",
    "feature_nadaraya_watson",
    "kernel_features_figure",
    "attention_costs",
    "cost_figure",
    "window_figure",
]

POSITION_SCHEMES = ("sinusoidal", "learned", "rotary", "alibi")


# --- the task -----------------------------------------------------------------------------------

def latest_marker_task(num_examples: int, seq_len: int, vocab_size: int = 24, num_markers: int = 8,
                       marker_rate: float = 0.2, seed: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids ``X`` (num_examples, seq_len) and labels ``Y`` of the same shape.

    Each token is a marker (an id below ``num_markers``) with probability
    ``marker_rate``, otherwise another id below ``vocab_size``. ``Y[:, i]`` is
    the latest marker among ``X[:, :i + 1]``, or ``-100`` (no label) when there
    is none yet. ``seed=None`` uses the book's seed.
    """
    num_examples = check_positive_int("num_examples", num_examples)
    seq_len = check_positive_int("seq_len", seq_len)
    num_markers = check_positive_int("num_markers", num_markers)
    vocab_size = check_int("vocab_size", vocab_size, minimum=num_markers + 1)
    if not 0.0 < marker_rate <= 1.0:
        raise ValueError(f"marker_rate must lie in (0, 1], got {marker_rate!r}")
    g = torch.Generator().manual_seed(resolve_seed(seed))
    is_marker = torch.rand(num_examples, seq_len, generator=g) < marker_rate
    markers = torch.randint(0, num_markers, (num_examples, seq_len), generator=g)
    others = torch.randint(num_markers, vocab_size, (num_examples, seq_len), generator=g)
    X = torch.where(is_marker, markers, others)
    positions = torch.arange(seq_len).expand(num_examples, seq_len)
    latest = torch.cummax(torch.where(is_marker, positions, torch.full_like(positions, -1)), dim=1).values
    Y = torch.where(latest >= 0, X.gather(1, latest.clamp_min(0)), torch.full_like(X, IGNORE))
    return X, Y


# --- local and linear attention -----------------------------------------------------------------

def check_qkv(q, k, v) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor) or t.dim() < 2 or not t.is_floating_point():
            got = f"{tuple(t.shape)} {t.dtype}" if isinstance(t, torch.Tensor) else type(t).__name__
            raise ValueError(f"{name} must be a floating-point tensor (..., length, features), got {got}")
    if q.shape[:-1] != k.shape[:-1] or k.shape[:-1] != v.shape[:-1] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"self-attention needs q, k, v with the same leading axes and length, and q and k the "
                         f"same features; got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")


def sliding_window_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    window: int,
    scale: float | None = None,
) -> torch.Tensor:
    """Causal self-attention in which position ``i`` sees only positions ``i - window + 1 .. i``.

    ``q``, ``k`` (..., n, d), ``v`` (..., n, d_v). The sequence is cut into blocks
    of ``window`` positions; each block of queries scores its own block and the
    previous one (2·window keys), so time and memory grow like ``n · window``,
    not ``n²``. The same numbers as softmax attention under the band mask.
    """
    check_qkv(q, k, v)
    window = check_positive_int("window", window)
    n = q.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    blocks = math.ceil(n / window)
    pad = blocks * window - n

    def split(t):  # (..., n, f) -> (..., blocks, window, f), zero rows appended
        padded = F.pad(t, (0, 0, 0, pad))
        return padded.reshape(*t.shape[:-2], blocks, window, t.shape[-1])

    qb, kb, vb = split(q), split(k), split(v)

    def with_previous(t):  # (..., blocks, 2 window, f): previous block, then own
        previous = F.pad(t, (0, 0, 0, 0, 1, 0))[..., :-1, :, :]
        return torch.cat((previous, t), dim=-2)

    # (..., blocks, window, 2 window)
    scores = (qb @ with_previous(kb).transpose(-2, -1)) * scale
    a = torch.arange(window, device=q.device)[:, None]  # query's place in its block
    c = torch.arange(2 * window, device=q.device)[None, :]  # key's place in 2 window
    # key position - query position = c - window - a, which must lie in (-window, 0]
    visible = (c > a) & (c <= a + window)
    first = torch.zeros(blocks, 1, 1, dtype=torch.bool, device=q.device)
    first[0] = True
    visible = visible & ~(first & (c < window))  # block 0 has no previous block
    weights = scores.masked_fill(~visible, float("-inf")).softmax(dim=-1)
    out = weights @ with_previous(vb)
    return out.reshape(*q.shape[:-2], blocks * window, v.shape[-1])[..., :n, :]


def elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    """φ(x) = elu(x) + 1, positive everywhere (Katharopoulos et al., 2020)."""
    return F.elu(x) + 1.0


def linear_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = True,
    feature_map: Callable[[torch.Tensor], torch.Tensor] = elu_feature_map,
    chunk: int = 64,
) -> torch.Tensor:
    """Attention with the kernel ``φ(q)·φ(k)`` in place of ``exp(q·k/√d)``, in time linear in the length.

    ``out_i = Σ_j φ(q_i)·φ(k_j) v_j / Σ_j φ(q_i)·φ(k_j)`` over all keys, or over
    ``j <= i`` when ``causal``. Because the kernel is a product of features, the
    sums over keys factor: ``φ(q_i)ᵀ (Σ_j φ(k_j) v_jᵀ)``, a (features × d_v)
    state computed once. The causal version walks over chunks of ``chunk``
    positions: inside a chunk the (chunk × chunk) products directly, before it
    the state carried from the earlier chunks. ``feature_map`` must return
    positive features (the default :func:`elu_feature_map`).
    """
    check_qkv(q, k, v)
    chunk = check_positive_int("chunk", chunk)
    fq, fk = feature_map(q), feature_map(k)
    if not causal:
        state, norm = fk.transpose(-2, -1) @ v, fk.sum(dim=-2)
        return (fq @ state) / (fq @ norm[..., None])
    state = fq.new_zeros(*fq.shape[:-2], fq.shape[-1], v.shape[-1])
    norm = fq.new_zeros(*fq.shape[:-2], fq.shape[-1])
    outs = []
    for c0 in range(0, q.shape[-2], chunk):
        qc, kc, vc = (t[..., c0 : c0 + chunk, :] for t in (fq, fk, v))
        # (..., chunk, chunk): the keys of this chunk up to each query
        inside = (qc @ kc.transpose(-2, -1)).tril()
        numerator = inside @ vc + qc @ state
        denominator = inside.sum(dim=-1, keepdim=True) + qc @ norm[..., None]
        outs.append(numerator / denominator)
        state = state + kc.transpose(-2, -1) @ vc
        norm = norm + kc.sum(dim=-2)
    return torch.cat(outs, dim=-2)


class LinearAttention(nn.Module):
    """Multi-head self-attention with :func:`linear_attention` in every head, a drop-in for the blocks.

    ``forward(queries, keys, values, valid_lens=None, *, attn_mask=None,
    causal=False)`` as :class:`~attention_book.MultiHeadAttention` (masks other
    than ``causal`` are not supported). There are no attention weights to
    record: the method never forms them.
    """

    def __init__(self, num_hiddens: int, num_heads: int):
        super().__init__()
        self.inner = MultiHeadAttention(num_hiddens, num_heads)  # its projections, and its checks
        self.num_heads = self.inner.num_heads
        self.attention_weights = None

    def forward(self, queries, keys, values, valid_lens=None, *, attn_mask=None, causal: bool = False):
        if valid_lens is not None or attn_mask is not None:
            raise ValueError("LinearAttention supports causal=True/False only, not valid_lens or attn_mask")
        inner = self.inner
        check_projection_inputs(inner, queries, keys, values)
        q, k, v = (transpose_qkv(t, inner.num_heads) for t in inner._project(queries, keys, values))
        # In float32 even under bfloat16 autocast: elu(x) + 1 rounds to exactly 0 in bfloat16 once x < -6.5
        # or so, and a query whose features all meet zeros makes the normaliser 0, so 0 / 0 = NaN (training
        # at lr 3e-3 diverged that way on a GPU). float32 keeps the features positive down to x = -17.
        wide = torch.promote_types(q.dtype, torch.float32)
        with torch.autocast(q.device.type, enabled=False):
            out = linear_attention(q.to(wide), k.to(wide), v.to(wide), causal=causal)
        return inner.W_o(out.to(v.dtype).transpose(1, 2).flatten(2))


# --- the model ----------------------------------------------------------------------------------

class LengthModel(nn.Module):
    """A small causal Transformer for the latest-marker task, with a choice of position scheme.

    ``LengthModel(positions='rotary', vocab_size=24, num_hiddens=32,
    num_heads=4, num_blks=1, max_len=1024, num_kv_heads=None, window=None,
    attention='softmax')``: token embedding (entries of std ``1/√d``, scaled by
    ``√d``), then for ``'sinusoidal'``/``'learned'`` a positional vector added
    (tables of ``max_len`` rows: a learned table trains only the rows of the
    training length), pre-norm causal blocks (chapter 7's
    :class:`~attention_book.TransformerEncoderBlock`) whose attention is
    rotary or ALiBi for those schemes, a final layer norm and a linear layer to
    ``vocab_size`` scores. ``forward(X)``: (batch, n) ids -> (batch, n, vocab).
    """

    def __init__(self, positions: str = "rotary", vocab_size: int = 24, num_hiddens: int = 32, num_heads: int = 4,
                 num_blks: int = 1, max_len: int = 1024, num_kv_heads: int | None = None,
                 window: int | None = None, attention: str = "softmax"):
        super().__init__()
        from ..models.transformer import TransformerEncoderBlock

        if positions not in POSITION_SCHEMES:
            raise ValueError(f"positions must be one of {POSITION_SCHEMES}, got {positions!r}")
        if attention not in ("softmax", "linear"):
            raise ValueError(f"attention must be 'softmax' or 'linear', got {attention!r}")
        if attention == "linear" and (positions in ("rotary", "alibi") or window is not None):
            raise ValueError("linear attention here takes positions added to the input ('sinusoidal' or 'learned') "
                             "and no window")
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        self.max_len = check_positive_int("max_len", max_len)
        self.num_hiddens, self.positions = check_positive_int("num_hiddens", num_hiddens), positions
        check_kv_heads(num_heads, num_kv_heads)
        self.window = check_optional_positive_int("window", window)
        self.embedding = nn.Embedding(vocab_size, num_hiddens)
        init_small_embeddings(self.embedding)
        self.pos = None
        if positions == "sinusoidal":
            self.pos = PositionalEncoding(num_hiddens, 0.0, max_len)
        elif positions == "learned":
            self.pos = LearnedPositionalEmbedding(num_hiddens, 0.0, max_len)

        def make_attention():
            if attention == "linear":
                return LinearAttention(num_hiddens, num_heads)
            variant = {"rotary": RotaryAttention, "alibi": ALiBiAttention}.get(positions, GroupedQueryAttention)
            return variant(num_hiddens, num_heads, num_kv_heads=num_kv_heads)

        self.blks = nn.ModuleList(
            TransformerEncoderBlock(num_hiddens, 2 * num_hiddens, num_heads, norm_first=True, causal=True,
                                    attention=make_attention())
            for _ in range(check_positive_int("num_blks", num_blks)))
        self.norm = nn.LayerNorm(num_hiddens)
        self.head = nn.Linear(num_hiddens, vocab_size)

    def forward(self, X: torch.Tensor) -> torch.Tensor:
        from ..models.transformer import check_token_range

        check_same_device("X", X, self)
        check_token_range("X", X, self.vocab_size, self.max_len)
        H = self.embedding(X) * math.sqrt(self.num_hiddens)
        if self.pos is not None:
            H = self.pos(H)
        band = None
        if self.window is not None:
            positions = torch.arange(X.shape[1], device=X.device)
            band = positions[None, :] > positions[:, None] - self.window  # causal is added by the blocks
        for blk in self.blks:
            H = blk(H, attn_mask=band)
        return self.head(self.norm(H))


def _marker_loss(model: nn.Module, batch) -> tuple[torch.Tensor, torch.Tensor]:
    X, Y = batch
    logits = model(X)
    return F.cross_entropy(logits.flatten(0, 1), Y.flatten(), ignore_index=IGNORE), (Y != IGNORE).sum()


@torch.no_grad()
def length_accuracy(model: nn.Module, lengths: Sequence[int], num_examples: int = 256, seed: int | None = None,
                    window: int | None = None, **task) -> dict[int, float]:
    """Accuracy on the latest-marker task at each length (over positions that have a label), in eval mode.

    ``window`` evaluates a softmax model as if it had been built with that
    sliding window (each position sees only the ``window`` latest); ``task``
    passes ``vocab_size``, ``num_markers``, ``marker_rate`` on. The test
    sequences of every length are drawn from ``seed`` (``None``: the book's
    seed + 2, apart from the training data).
    """
    seed = resolve_seed(seed, 2)
    dev = next(model.parameters()).device
    saved = getattr(model, "window", None)
    if window is not None:
        model.window = check_positive_int("window", window)
    out = {}
    try:
        with evaluating(model):
            for n in lengths:
                X, Y = latest_marker_task(num_examples, check_positive_int("length", n), seed=seed + n, **task)
                X, Y = X.to(dev), Y.to(dev)
                labelled = Y != IGNORE
                right = (model(X).argmax(dim=-1) == Y) & labelled
                out[int(n)] = int(right.sum()) / max(int(labelled.sum()), 1)
    finally:
        if window is not None:
            model.window = saved
    return out


def train_length_model(positions: str = "rotary", *, seq_len: int = 32, num_train: int = 3200, epochs: int = 4,
                       batch_size: int = 32, lr: float = 3e-3, seed: int | None = None, progress: bool = True,
                       desc: str | None = None, task: dict | None = None, **model_kwargs):
    """Build a :class:`LengthModel` and train it on sequences of ``seq_len`` tokens with :func:`ab.fit`.

    Adam at ``lr`` with 30 warm-up steps and a cosine decay, gradients clipped
    at 1, ``num_train`` sequences for ``epochs`` epochs; the accuracy on fresh
    sequences of the training length is recorded after every epoch
    (``history.metrics['accuracy']``). ``seed`` fixes the weights, data and
    batch order (``None``: the book's seed). ``task`` holds
    :func:`latest_marker_task` settings. Returns ``(model, history)``.
    """
    from ..core.train import warmup_cosine_schedule

    task = dict(task or {})
    seed = resolve_seed(seed)
    torch.manual_seed(seed)
    model = LengthModel(positions, vocab_size=task.get("vocab_size", 24), **model_kwargs)
    X, Y = latest_marker_task(num_train, seq_len, seed=seed + 1, **task)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(X, Y), batch_size=batch_size, shuffle=True,
                                         drop_last=True, generator=torch.Generator().manual_seed(seed))
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    steps = check_positive_int("epochs", epochs) * len(loader)
    scheduler = warmup_cosine_schedule(optimizer, min(30, steps), steps)
    history = fit(model, loader, _marker_loss, epochs=epochs, optimizer=optimizer, scheduler=scheduler,
                  clip_grad=1.0, progress=progress, desc=desc or positions,
                  evaluate=lambda m: {"accuracy": length_accuracy(m, [seq_len], 128, seed=seed + 3, **task)[seq_len]})
    return model, history


# --- figures ------------------------------------------------------------------------------------

# (dash, marker) of the k-th model in length_curves_figure: the first four are POSITION_SCHEMES';
# the next two (a windowed and a linear model in the chapter) differ from the lines they run along.
_LINE_STYLES = [("-", "o"), ("--", "s"), ("-.", "^"), ("-", "D"), ("--", "v"), (":", "X")]


def length_curves_figure(curves: dict[str, dict[int, float]], train_len: int, chance: float | None = None,
                         title: str = "Accuracy beyond the training length", ax=None):
    """Accuracy against test length (log axis), one line per model; the training length marked."""
    import matplotlib.pyplot as plt

    from ..core.plot import ensure_style, chance_line

    if not curves:
        raise ValueError("length_curves_figure needs at least one curve")
    ensure_style()
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.8, 3.6), layout="constrained")
    else:
        fig = ax.figure
    # One colour, dash and marker per model, fixed for the four position schemes: lines that coincide
    # (ALiBi and a windowed model near the top, sinusoidal and learned beyond the training length) stay
    # visible one over the other, and a model keeps its look from one figure to the next.
    others = iter(range(len(POSITION_SCHEMES), 10))
    for name, points in curves.items():
        lengths = sorted(points)
        k = POSITION_SCHEMES.index(name) if name in POSITION_SCHEMES else next(others, 9)
        dash, marker = _LINE_STYLES[k % len(_LINE_STYLES)]
        ax.plot(lengths, [points[n] for n in lengths], label=name, color=f"C{k}", linestyle=dash,
                marker=marker, markersize=5, markerfacecolor="none" if k % 2 else f"C{k}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({n for p in curves.values() for n in p}))
    ax.xaxis.set_major_formatter(plt.FuncFormatter(plain_number))
    ax.axvline(train_len, color="0.5", linestyle="--", linewidth=1)
    ax.annotate("training length", (train_len, 0.04), xytext=(4, 0), textcoords="offset points", fontsize=8,
                color="0.4")
    if chance is not None:
        chance_line(ax, chance)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("test sequence length")
    ax.set_ylabel("accuracy")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.0, 0.5))
    return fig


@torch.no_grad()
def length_attention_figure(models: dict[str, LengthModel], seq_len: int = 96, train_len: int = 32,
                              example: int = 0, seed: int | None = None, num_markers: int = 8):
    """Each model's attention over one test sequence of ``seq_len`` tokens (first block).

    Rows are queries, columns keys; each pixel is the largest weight any head
    gives that pair. The dashed line marks the training length; the markers of
    the sequence are ticked (blue) on the key axis, so a map that follows the
    latest marker shows as a staircase along the diagonal.
    """
    import matplotlib.pyplot as plt

    from ..core.plot import BOOK_CMAP, PAGE_FIGURE_WIDTH, ensure_style

    X, _ = latest_marker_task(example + 1, seq_len, num_markers=num_markers, seed=resolve_seed(seed, 2) + seq_len)
    X = X[example:example + 1]
    ensure_style()
    # At most two maps side by side: four in a row would shrink to the column's width and hide the
    # staircase; two per row keep each map about 3.5 inches wide.
    cols = min(len(models), 2)
    rows = -(-len(models) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(min(3.6 * cols + 0.8, PAGE_FIGURE_WIDTH), 3.2 * rows),
                             layout="constrained", squeeze=False, sharex=True, sharey=True)
    for ax in axes.flat[len(models):]:
        ax.set_visible(False)
    image = None
    for k, (ax, (name, model)) in enumerate(zip(axes.flat, models.items())):
        with evaluating(model), record_attention(model) as maps:
            model(X.to(next(model.parameters()).device))
        weights = maps.tensors()[0][0].amax(dim=0).cpu()  # (queries, keys): the largest weight over the heads
        image = ax.imshow(weights.numpy(), cmap=BOOK_CMAP, vmin=0, vmax=1, aspect="auto", interpolation="nearest")
        ax.axhline(train_len - 0.5, color="0.3", linewidth=0.8, linestyle="--")
        ax.set_xticks((X[0] < num_markers).nonzero().flatten().tolist())
        ax.set_xticklabels([])
        ax.tick_params(axis="x", bottom=True, length=6, width=1.5, color="tab:blue")
        ax.grid(False)
        ax.set_title(name, fontsize=10)
        if k + cols >= len(models):  # the lowest map of its column
            ax.set_xlabel("key position (ticks: markers)")
        if k % cols == 0:
            ax.set_ylabel("query position")
    cbar = fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8)
    cbar.set_label("largest weight over the heads", fontsize=11)
    cbar.ax.tick_params(labelsize=10)
    return fig


@torch.no_grad()
def latest_marker_focus(model: LengthModel, seq_len: int = 96, train_len: int = 32, num_examples: int = 64,
                        seed: int | None = None, num_markers: int = 8) -> float:
    """How often the strongest weight of a query beyond ``train_len`` lands on its latest marker.

    Over ``num_examples`` test sequences of ``seq_len`` tokens (drawn as for
    :func:`length_attention_figure`), take the first block's weights, the
    largest over the heads for each (query, key) pair, and for each query at a
    position ``>= train_len`` that has a marker at or before it, ask whether its
    heaviest key is that latest marker. Returns the share of such queries, a
    number between 0 and 1 (what the maps of :func:`length_attention_figure` show
    for one sequence, counted over many).
    """
    seq_len, train_len = check_positive_int("seq_len", seq_len), check_int("train_len", train_len, minimum=0)
    X, _ = latest_marker_task(check_positive_int("num_examples", num_examples), seq_len, num_markers=num_markers,
                              seed=resolve_seed(seed, 2) + seq_len)
    X = X.to(next(model.parameters()).device)
    with evaluating(model), record_attention(model) as maps:
        model(X)
    heaviest = maps.tensors()[0].amax(dim=1).argmax(dim=-1)  # (examples, queries): the key with most weight
    positions = torch.arange(seq_len, device=X.device).expand_as(X)
    latest = torch.cummax(torch.where(X < num_markers, positions, torch.full_like(positions, -1)), dim=1).values
    asked = (latest >= 0) & (positions >= train_len)
    return int(((heaviest == latest) & asked).sum()) / max(int(asked.sum()), 1)


# --- chapter 2's kernel, through features ---------------------------------------------------------

def random_fourier_features(
    x: torch.Tensor, num_features: int, sigma: float = 1.0, seed: int | None = None
) -> torch.Tensor:
    """Features φ(x) (n, num_features) with ``φ(q)·φ(k) ≈ exp(-‖q - k‖² / (2σ²))``: chapter 2's Gaussian.

    ``φ(x) = √(2/r) cos(Wx/σ + b)`` with the ``r`` rows of ``W`` drawn from
    N(0, I) and ``b`` uniform in [0, 2π) (Rahimi and Recht, 2007): the product
    is an average of ``r`` random terms whose expectation is exactly the kernel,
    so the error shrinks like ``1/√r``. ``x`` is (n,) or (n, d).
    """
    floating = isinstance(x, torch.Tensor) and x.is_floating_point()
    if not floating or x.dim() not in (1, 2):
        raise ValueError("x must be a floating-point tensor of shape (n,) or (n, d)")
    num_features = check_positive_int("num_features", num_features)
    if not (isinstance(sigma, (int, float)) and math.isfinite(sigma) and sigma > 0):
        raise ValueError(f"sigma must be a positive number, got {sigma!r}")
    points = (x[:, None] if x.dim() == 1 else x).to(torch.float64)
    g = torch.Generator().manual_seed(resolve_seed(seed, 4))
    W = torch.randn(num_features, points.shape[1], generator=g, dtype=torch.float64)
    b = torch.rand(num_features, generator=g, dtype=torch.float64) * 2 * math.pi
    features = math.sqrt(2.0 / num_features) * torch.cos(points @ W.T / sigma + b)
    return features.to(x.dtype)


def feature_nadaraya_watson(
    x_train: torch.Tensor,
    y_train: torch.Tensor,
    x_query: torch.Tensor,
    sigma: float = 1.0,
    num_features: int = 256,
    seed: int | None = None,
) -> torch.Tensor:
    """Chapter 2's Gaussian Nadaraya–Watson estimate, computed through random features in linear time.

    ``ŷ(q) = φ(q)ᵀ(Σ_i φ(k_i) y_i) / φ(q)ᵀ(Σ_i φ(k_i))``: the two sums over the
    training points are computed once, so ``m`` queries cost ``O((m + n) r)``
    instead of ``O(m n)`` — linear attention with the kernel's features.
    """
    phi_k = random_fourier_features(x_train, num_features, sigma, seed)
    phi_q = random_fourier_features(x_query, num_features, sigma, seed)
    values = (y_train[:, None] if y_train.dim() == 1 else y_train).to(phi_k.dtype)
    numerator = phi_q @ (phi_k.T @ values)  # (queries, outputs)
    denominator = phi_q @ phi_k.sum(dim=0)  # (queries,)
    y_hat = numerator / denominator[:, None]
    return y_hat[:, 0] if y_train.dim() == 1 else y_hat


def kernel_features_figure(data, sigma: float = 0.5, feature_counts: Sequence[int] = (16, 256, 4096),
                           seed: int | None = None):
    """Chapter 2's Gaussian estimate (exact, O(mn)) against its random-feature version for several ``r``.

    ``data`` is chapter 2's :class:`~attention_book.models.kernels.KernelData`. Prints the
    largest gap between the two estimates for each number of features.
    """
    import matplotlib.pyplot as plt

    from ..models.kernels import nadaraya_watson
    from ..core.plot import ensure_style

    exact, _ = nadaraya_watson(data.x_train, data.y_train, data.x_val, "gaussian", sigma)
    ensure_style()
    fig, ax = plt.subplots(figsize=(6.0, 3.4), layout="constrained")
    ax.scatter(data.x_train, data.y_train, s=10, color="0.6", label="training points")
    ax.plot(data.x_val, exact, color="black", linewidth=2, label="exact kernel (chapter 2)")
    gaps = {}
    for r in feature_counts:
        approx = feature_nadaraya_watson(data.x_train, data.y_train, data.x_val, sigma, r, seed)
        gaps[r] = float((approx - exact).abs().max())
        ax.plot(data.x_val, approx, linewidth=1.2, label=f"{r} features")
    ax.set_ylim(float(exact.min()) - 2, float(exact.max()) + 2)
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_title(f"Gaussian kernel regression, σ = {sigma}: exact and through features", fontsize=10)
    ax.legend(fontsize=8)
    print("largest gap to the exact estimate")
    print("features | gap")  # one short row each: fits a phone
    for r, g in gaps.items():
        print(f"{r:>8} | {g:.3f}")
    return fig, gaps


# --- costs against length -----------------------------------------------------------------------

def _cost_methods(window: int):
    def explicit(q, k, v):
        return attend(q, k, v, causal=True, need_weights=True)[0]

    def fused(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    return {
        "softmax, explicit": explicit,
        "softmax, fused kernel": fused,
        f"sliding window ({window})": lambda q, k, v: sliding_window_attention(q, k, v, window),
        "linear": lambda q, k, v: linear_attention(q, k, v, causal=True),
    }


def attention_costs(lengths: Sequence[int] = (256, 512, 1024, 2048), *, heads: int = 2, head_dim: int = 16,
                    window: int = 64, repeats: int = 3, seed: int | None = None) -> dict[str, dict[str, list]]:
    """Peak memory (bytes, :class:`~attention_book.PeakMemory`) and time (seconds, median of ``repeats``) of
    one forward + backward pass of causal self-attention at each length, batch 1.

    Four methods: the explicit softmax (weights stored), PyTorch's fused kernel,
    :func:`sliding_window_attention` and :func:`linear_attention`. Returns
    ``{method: {'memory': [...], 'seconds': [...]}}`` in the order of ``lengths``.
    """
    from ..core.memory import peak_memory

    g = torch.Generator().manual_seed(resolve_seed(seed, 5))
    methods = _cost_methods(check_positive_int("window", window))
    costs = {name: {"memory": [], "seconds": []} for name in methods}
    for n in lengths:
        q, k, v = (torch.randn(1, heads, n, head_dim, generator=g).requires_grad_() for _ in range(3))
        for name, fn in methods.items():
            def step():
                fn(q, k, v).sum().backward()

            costs[name]["memory"].append(peak_memory(step))
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                step()
                times.append(time.perf_counter() - start)
            costs[name]["seconds"].append(statistics.median(times))
            q.grad = k.grad = v.grad = None
    return costs


def cost_figure(costs: dict[str, dict[str, list]], lengths: Sequence[int]):
    """Peak memory and time against length for each method of :func:`attention_costs` (log–log)."""
    import matplotlib.pyplot as plt

    from ..core.plot import ensure_style, readable_log_axis

    ensure_style()
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.6, 3.5), layout="constrained")
    for name, cost in costs.items():
        left.plot(lengths, [m / 2 ** 20 for m in cost["memory"]], marker="o", markersize=4, label=name)
        right.plot(lengths, [s * 1e3 for s in cost["seconds"]], marker="o", markersize=4, label=name)
    for ax, label in ((left, "peak memory (MiB)"), (right, "time (ms), forward + backward")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(list(lengths))
        ax.xaxis.set_major_formatter(plt.FuncFormatter(plain_number))
        readable_log_axis(ax, "y")
        ax.set_xlabel("sequence length")
        ax.set_ylabel(label)
    left.set_title("memory (tensor bytes, deterministic)", fontsize=10)
    right.set_title("time (this machine, this run)", fontsize=10)
    left.legend(fontsize=8)
    return fig


def window_figure(window: int, model: LengthModel, lengths: Sequence[int] = (32, 64, 128, 256),
                  full: dict[int, float] | None = None, train_len: int = 32, show_len: int = 48,
                  seed: int | None = None):
    """For a slider on the window: which keys each query sees, and ``model``'s accuracy when it sees only those.

    Left, the band of visible (query, key) pairs on ``show_len`` positions.
    Right, the accuracy of ``model`` (trained without a window) evaluated with
    this window at every length, beside ``full`` (its accuracy with none), and
    the share of the ``n²`` scores the window computes at the longest length.
    """
    import matplotlib.pyplot as plt

    from ..core.plot import BOOK_CMAP, ensure_style

    window = check_positive_int("window", window)
    accuracy = length_accuracy(model, lengths, seed=seed, window=window)
    pos = torch.arange(show_len)
    band = (pos[None, :] <= pos[:, None]) & (pos[None, :] > pos[:, None] - window)
    ensure_style()
    fig, (left, right) = plt.subplots(1, 2, figsize=(8.6, 3.4), layout="constrained",
                                      gridspec_kw={"width_ratios": [1, 1.5]})
    left.imshow(band.float().numpy(), cmap=BOOK_CMAP, vmin=0, vmax=1, interpolation="nearest")
    left.grid(False)
    left.set_xlabel("key position")
    left.set_ylabel("query position")
    longest = max(lengths)
    share = min(window, longest) * (2 * longest - min(window, longest) + 1) / 2 / longest ** 2
    left.set_title(f"window {window}: each query sees ≤ {window} keys\n"
                   f"(at length {longest}: {share:.0%} of the n² scores)", fontsize=10)
    if full is not None:
        right.plot(list(full), list(full.values()), marker="o", markersize=4, color="0.6", label="no window")
    right.plot(list(accuracy), list(accuracy.values()), marker="o", markersize=4, label=f"window {window}")
    right.set_xscale("log", base=2)
    right.set_xticks(list(lengths))
    right.xaxis.set_major_formatter(plt.FuncFormatter(plain_number))
    right.axvline(train_len, color="0.5", linestyle="--", linewidth=1)
    right.set_ylim(0, 1.02)
    right.set_xlabel("test sequence length")
    right.set_ylabel("accuracy")
    right.set_title(f"accuracy with a window of {window}, and with none", fontsize=10)
    right.legend(fontsize=8, loc="lower left")
    return fig
