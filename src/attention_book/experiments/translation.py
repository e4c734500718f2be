"""The translation experiments of chapters 4 and 7: training a translator, comparing
variants, scoring by length, the alignment figure, and the Transformer's attention maps."""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from ..core.checks import check_positive_int
from ..core.train import capped_batches, evaluating, model_device
from ..data.text import EOS, PAD, preprocess_nmt, tokenize_nmt
from ..models.attention import record_attention
from ..models.seq2seq import Translation, make_seq2seq, translate, translation_loss
from ..models.transformer import make_transformer

__all__ = ["train_transformer", "translation_attention", "translation_attention_figure", "train_translator", "compare_translators", "evaluate_by_length", "translation_table", "print_records", "print_bleu_parts", "alignment_figure", "teacher_forced_scores", "validation_loss", "evaluate_translation"]


def train_transformer(data, num_hiddens: int = 256, ffn_num_hiddens: int = 64, num_heads: int = 4,
                      num_blks: int = 2, dropout: float = 0.2, lr: float = 0.001, epochs: int = 30,
                      clip_grad: float = 1.0, norm_first: bool = False, progress: bool = True,
                      desc: str = "Transformer", seed: int | None = None):
    """Build a :func:`make_transformer` model for ``data`` and train it with :func:`attention_book.fit`.

    d2l's recipe: Adam at a constant ``lr``, gradient norm clipped at
    ``clip_grad``, the masked cross-entropy of ``ab.translation_loss``, and the
    validation loss recorded after every epoch (``history.metrics['val loss']``).
    ``seed`` seeds the initial weights, the dropout masks and the batch order;
    ``None`` (the default) uses the book's seed (``ab.book_seed()``). Returns
    ``(model, history)``.
    """
    from ..core.config import seed_everything
    from ..models.seq2seq import translation_loss
    from ..data.text import PAD
    from ..core.train import fit

    seed = seed_everything(seed)  # None: the book's seed
    model = make_transformer(len(data.src_vocab), len(data.tgt_vocab), num_hiddens, ffn_num_hiddens, num_heads,
                             num_blks, dropout, norm_first=norm_first)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    history = fit(model, data.train_loader(seed=seed), translation_loss(data.tgt_vocab[PAD]), epochs=epochs,
                  optimizer=optimizer, clip_grad=clip_grad,
                  evaluate=lambda m: {"val loss": validation_loss(m, data)}, progress=progress, desc=desc)
    return model, history


def translation_attention(model: nn.Module, data, sentence: str) -> dict:
    """Translate ``sentence`` greedily and collect every attention map of the model for it.

    Returns a dict with

    * ``'source'``: the source tokens (without padding), ``'output'``: the
      predicted tokens, ``'queries'``: the decoder inputs ``<bos>`` + output (the
      query in row t predicts output token t, or ``<eos>`` in the last row);
    * ``'encoder'`` (layers, heads, S, S), ``'decoder_self'`` (layers, heads, T, T)
      and ``'cross'`` (layers, heads, T, S) attention weights, S the source length
      with ``<eos>``, T = len(output) + 1.

    The maps come from one teacher-forced pass over ``<bos>`` + output in eval
    mode, which computes the same numbers as the step-by-step decoding with the
    cache (a test checks the two agree).
    """
    from ..models.seq2seq import translate
    from ..data.text import BOS

    (result,) = translate(model, data, [sentence])
    dev = next(model.parameters()).device
    src, _, src_valid_len, _ = data.build([sentence])
    src, src_valid_len = src.to(dev), src_valid_len.to(dev)
    bos = data.tgt_vocab[BOS]
    tgt = torch.tensor([[bos] + data.tgt_vocab[result.tokens]], dtype=torch.long, device=dev)
    S, T = int(src_valid_len[0]), tgt.shape[1]
    with evaluating(model), torch.no_grad(), record_attention(model) as maps:
        enc_outputs = model.encoder(src, src_valid_len)
        model.decoder(tgt, model.decoder.init_state(enc_outputs, src_valid_len))
    enc = maps.stacked("self", under="encoder")[:, 0, :, :S, :S]
    dec_self = maps.stacked("self", under="decoder")[:, 0]
    cross = maps.stacked("cross", under="decoder")[:, 0, :, :, :S]
    return {
        "source": data.src_vocab.to_tokens(src[0, :S].tolist()),
        "output": list(result.tokens),
        "queries": [BOS] + list(result.tokens),
        "encoder": enc.cpu(),
        "decoder_self": dec_self.cpu(),
        "cross": cross.cpu()[:, :, :T],
    }


def translation_attention_figure(maps: dict, kind: str = "encoder", layer: int | None = None,
                                 heads_per_row: int = 2, figsize=None):
    """Heatmaps of one kind of attention from :func:`translation_attention`, labelled with tokens.

    ``kind`` is ``'encoder'``, ``'decoder_self'`` or ``'cross'``. One plot per
    head of every layer (or only ``layer``, counted from 1), ``heads_per_row``
    plots side by side, layer after layer; in each plot the rows are queries and
    the columns keys. Two plots per row keep the token labels readable in the
    book's column (a page about 688 pixels wide).
    """
    if kind not in _MAP_KINDS:
        raise ValueError(f"kind must be one of {sorted(_MAP_KINDS)}, got {kind!r}")
    from ..core.plot import heatmaps_figure

    title, q_name, k_name, xlabel, ylabel = _MAP_KINDS[kind]
    weights = maps[kind]  # (layers, heads, queries, keys)
    num_layers, num_heads = weights.shape[:2]
    heads_per_row = check_positive_int("heads_per_row", heads_per_row)
    if num_heads % heads_per_row:
        raise ValueError(f"heads_per_row must divide the number of heads ({num_heads}), got {heads_per_row}")
    layers = list(range(num_layers))
    if layer is not None:
        if not 1 <= layer <= num_layers:
            raise ValueError(f"layer must lie in 1..{num_layers}, got {layer}")
        layers = [layer - 1]
    panels = weights[layers].reshape(-1, heads_per_row, *weights.shape[2:])
    if figsize is None:
        figsize = (1.2 + 2.7 * heads_per_row, 0.9 + 2.5 * panels.shape[0])
    fig = heatmaps_figure(panels, xlabel=xlabel, ylabel=ylabel,
                        titles=[f"layer {i + 1}, head {h + 1}" for i in layers for h in range(num_heads)],
                        figsize=figsize, xticklabels=maps[k_name], yticklabels=maps[q_name], vmin=0.0, vmax=1.0)
    source, output = " ".join(maps["source"][:-1]), " ".join(maps["output"])
    fig.suptitle(f"{title}\n{source} → {output}")
    return fig


def evaluate_by_length(model: nn.Module, data, split: str = "val", beam_size: int | None = None,
                       k: int = 2) -> dict[int, dict[str, float]]:
    """:func:`evaluate_translation` for each source length separately.

    The length of a source sentence is the number of tokens the model reads
    before ``<eos>`` (punctuation counts; at most ``num_steps``). Returns
    ``{length: {"pairs": how many, "bleu": mean BLEU, "exact": exact-match rate}}``,
    shortest first.
    """
    groups: dict[int, list[Translation]] = {}
    for result in _translate_split(model, data, split, beam_size, k):
        length = min(len(tokenize_nmt(preprocess_nmt(result.source))) - 1, data.num_steps)
        groups.setdefault(length, []).append(result)
    return {n: {"pairs": len(group), **_mean_scores(group)} for n, group in sorted(groups.items())}


def translation_table(model: nn.Module, data, sentences: Sequence[str], references: Sequence[str],
                      beam_size: int | None = None, k: int = 2) -> list[Translation]:
    """Translate and print the results, one group of lines per sentence; return them.

    Each group is the source, then ``-> translation``, then ``= reference`` and the BLEU
    score: narrow enough for a phone's column (about 40 characters for short sentences).
    """
    results = translate(model, data, sentences, references, beam_size=beam_size, k=k)
    for r in results:
        print(r.source)
        print(f"  -> {r.text}")
        if r.reference is not None:
            print(f"  =  {r.reference}  (BLEU {r.bleu:.3f})")
    return results


def print_records(records: dict[str, dict[str, str]], indent: int = 2) -> None:
    """Print a narrow table: each record's name, then its ``field value`` lines, aligned.

    ``records`` maps a name to ``{field: formatted value}``; a phone-width alternative
    to a table with one column per field.
    """
    width = max((len(key) for fields in records.values() for key in fields), default=0)
    for name, fields in records.items():
        print(name)
        for key, value in fields.items():
            print(f"{' ' * indent}{key:<{width}}  {value}")


def _wrap_items(items: Sequence[str], width: int, indent: str) -> list[str]:
    lines, line = [], indent
    for item in items:
        if line.strip() and len(line) + 2 + len(item) > width:
            lines.append(line)
            line = indent
        line += ("  " if line.strip() else "") + item
    return lines + [line]


def print_bleu_parts(prediction: str, reference: str, parts: dict, width: int = 40) -> None:
    """Print :func:`~attention_book.data.text.bleu_parts` as a worked example, ``width`` wide.

    For each n: the prediction's n-grams marked ✓ (matched) or ✗, then
    ``p_n = matched/all`` and the exponent ``1/2^n``; then the brevity penalty.
    """
    print(f"prediction: {prediction}")
    for order in parts["orders"]:
        n, matched = order["n"], order["matched"]
        marks = [f"{g} {'✓' if m else '✗'}" for g, m in zip(order["grams"], matched)]
        print(f"  {n}-grams:")
        print("\n".join(_wrap_items(marks, width, "    ")))
        print(f"  p_{n} = {sum(matched)}/{len(matched)} = {order['precision']:.3f},"
              f" exponent {order['weight']:g}")
    ratio = f"{len(reference.split())}/{len(prediction.split())}"
    print(f"  BP = exp(min(0, 1 - {ratio})) = {parts['penalty']:.3f}")


def alignment_figure(model: nn.Module, data, sentence: str, reference: str | None = None, figsize=(4.4, 3.8)):
    """Heatmap of the decoder's attention while it translates one sentence greedily.

    Rows (queries) are the output tokens, the last one ``<eos>`` when the model
    produced it; columns (keys) are the source tokens including ``<eos>``
    (padding dropped; unknown words marked ``(unk)``). The title shows the
    translation (and its BLEU when ``reference`` is given). Returns the figure.
    """
    from ..core.plot import heatmaps_figure

    (result,) = translate(model, data, [sentence], [reference] if reference is not None else None,
                          save_attention=True)
    if result.attention is None:
        raise ValueError("the model's decoder exposed no attention weights for this sentence")
    src_tokens = tokenize_nmt(preprocess_nmt(sentence))[: data.num_steps]
    src_tokens = [t if t in data.src_vocab.token_to_idx else f"{t} (unk)" for t in src_tokens]
    out_tokens = result.tokens + ([EOS] if result.attention.shape[0] > len(result.tokens) else [])
    weights = result.attention[: len(out_tokens), : len(src_tokens)]
    fig = heatmaps_figure(weights.reshape(1, 1, *weights.shape), xlabel="keys: source tokens",
                        ylabel="queries: output tokens", xticklabels=src_tokens, yticklabels=out_tokens,
                        figsize=figsize)
    title = f"{sentence} => {result.text}"
    if result.bleu is not None:
        title += f"  (BLEU {result.bleu:.3f})"
    fig.suptitle(title, fontsize=10)
    return fig


@torch.no_grad()
def validation_loss(model: nn.Module, data) -> float:
    """Masked cross-entropy per real token over the validation pairs (teacher forcing, eval mode)."""
    dev = model_device(model)
    loss_fn = translation_loss(data.tgt_vocab[PAD])
    total, count = 0.0, 0.0
    with evaluating(model):
        for batch in capped_batches(data.val_loader()):
            mean, n = loss_fn(model, [t.to(dev) for t in batch])
            total += float(mean) * float(n)
            count += float(n)
    return total / max(count, 1.0)


@torch.no_grad()
def teacher_forced_scores(model: nn.Module, data) -> dict[str, float]:
    """What the validation loss averages, taken apart: every real validation token, teacher forcing.

    The decoder reads the true previous tokens (as in training) and predicts
    each next one. Returns ``{"loss": cross-entropy per token (the validation
    loss), "accuracy": share of tokens whose highest score is the right one,
    "loss when wrong": mean cross-entropy over the tokens it gets wrong}``.
    A model can be right more often and still have the higher loss when its
    mistakes are confident ones.
    """
    dev = model_device(model)
    pad = data.tgt_vocab[PAD]
    total, right, wrong_loss, count, wrong = 0.0, 0.0, 0.0, 0.0, 0.0
    with evaluating(model):
        for batch in capped_batches(data.val_loader()):
            src, tgt_input, src_valid_len, label = [t.to(dev) for t in batch]
            logits = model(src, tgt_input, src_valid_len).float()
            per_token = F.cross_entropy(logits.transpose(1, 2), label, reduction="none")
            real = label != pad
            hit = (logits.argmax(-1) == label) & real
            miss = real & ~hit
            total += float(per_token[real].sum())
            right += float(hit.sum())
            wrong_loss += float(per_token[miss].sum())
            count += float(real.sum())
            wrong += float(miss.sum())
    return {"loss": total / max(count, 1.0), "accuracy": right / max(count, 1.0),
            "loss when wrong": wrong_loss / max(wrong, 1.0)}


def train_translator(data, embed_size: int = 256, num_hiddens: int = 256, num_layers: int = 2,
                     dropout: float = 0.2, lr: float = 0.005, epochs: int = 30, cell: str = "gru",
                     attention: str | None = "additive", clip_grad: float = 1.0, progress: bool = True,
                     desc: str = "training", seed: int | None = None):
    """Build a model with :func:`make_seq2seq` and train it on ``data`` with :func:`attention_book.fit`.

    Adam with learning rate ``lr``, gradient norm clipped at ``clip_grad``, the
    masked loss of :func:`translation_loss`, and the validation loss recorded
    after every epoch (``history.metrics['val loss']``). ``seed`` seeds the
    initial weights, the dropout masks and the order of the batches; ``None``
    (the default) uses the book's seed (``ATTENTION_BOOK_SEED``), so the same
    call in a chapter gives another run when that variable changes.
    Returns ``(model, history)``.
    """
    from ..core.config import seed_everything
    from ..core.train import fit

    seed = seed_everything(seed)  # None: the book's seed
    model = make_seq2seq(len(data.src_vocab), len(data.tgt_vocab), embed_size, num_hiddens, num_layers, dropout,
                         cell=cell, attention=attention)
    history = fit(model, data.train_loader(seed=seed), translation_loss(data.tgt_vocab[PAD]), epochs=epochs,
                  lr=lr, clip_grad=clip_grad, evaluate=lambda m: {"val loss": validation_loss(m, data)},
                  progress=progress, desc=desc)
    return model, history


def compare_translators(data, variants: dict[str, dict], progress: bool = False, **common) -> list[dict]:
    """Train one model per variant (``{name: overrides of train_translator's arguments}``) and score it.

    Every variant starts from the same random seed (``seed`` in ``common``, by
    default the book's seed) and shares ``common`` settings.
    Returns one row per variant: name, seconds, final training loss, validation
    loss, validation BLEU (greedy) and the trained model.
    """
    rows = []
    for name, overrides in variants.items():
        settings = {**common, **overrides}
        model, history = train_translator(data, progress=progress, desc=name, **settings)
        scores = evaluate_translation(model, data, "val")
        rows.append({"variant": name, "seconds": history.seconds, "train loss": history.train_loss[-1],
                     "val loss": history.metrics["val loss"][-1], "val BLEU": scores["bleu"], "model": model,
                     "history": history})
    return rows


def _translate_split(model: nn.Module, data, split: str, beam_size: int | None, k: int) -> list[Translation]:
    """Every pair of a split of ``data`` (``'train'`` or ``'val'``) translated and scored."""
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    start, stop = (0, data.num_train) if split == "train" else (data.num_train, data.num_train + data.num_val)
    pairs = data.raw_pairs[start:stop]
    if not pairs:
        raise ValueError(f"split {split!r} of the data has no pairs to score")
    return translate(model, data, [en for en, _ in pairs], [_normalise(fr) for _, fr in pairs],
                     beam_size=beam_size, k=k)


def _mean_scores(results: Sequence[Translation]) -> dict[str, float]:
    scores = [r.bleu for r in results]
    exact = [r.text == r.reference for r in results]
    return {"bleu": sum(scores) / len(scores), "exact": sum(exact) / len(exact)}


def evaluate_translation(model: nn.Module, data, split: str = "val", beam_size: int | None = None,
                         k: int = 2) -> dict[str, float]:
    """Mean BLEU and exact-match rate of ``model`` on a split of ``data`` (``'train'`` or ``'val'``)."""
    return _mean_scores(_translate_split(model, data, split, beam_size, k))


_MAP_KINDS = {
    "encoder": ("encoder self-attention", "source", "source", "key (source token)", "query (source token)"),
    "decoder_self": ("decoder self-attention", "queries", "queries", "key (decoder input)", "query (decoder input)"),
    "cross": ("encoder–decoder attention", "queries", "source", "key (source token)", "query (decoder input)"),
}


def _normalise(sentence: str) -> str:
    return " ".join(tokenize_nmt(preprocess_nmt(sentence))[:-1])
