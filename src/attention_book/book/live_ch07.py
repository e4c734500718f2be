"""Chapter 7's live view: the reader types English, the trained Transformer answers in French.

On the website the page runs the notebook's Transformer as ONNX graphs, one per
sublayer group, because a page may load at most :data:`~attention_book.book.live.MAX_MODEL_BYTES`
a graph and one decoder block of the chapter's model (d = 256) is larger than that:

* ``enc0``, ``enc1``, ...: encoder block i (``enc0`` embeds the source ids first);
* ``dec0_self``, ``dec1_self``, ...: the masked self-attention sublayer of decoder block i
  (``dec0_self`` embeds the target ids first);
* ``dec0_cross``, ``dec1_cross``, ...: the encoder-decoder attention and FFN sublayers of
  decoder block i, with that block's cross-attention weights as a second output (the last
  one ends with the output layer: the scores of the next token after the last position).

``ch07.mjs`` chains them: it encodes the padded source once, then decodes greedily,
running the decoder graphs over ``<bos>`` and every token written so far at each step
(no key/value cache: at most ``num_steps + 1`` positions), and after the last step it has
the cross-attention maps of the whole translation, exactly the teacher-forced maps
``translation.translation_attention`` collects in Python. The weights stay float32,
so a typed sentence gets the very tokens ``ab.translate`` gives. In Jupyter or Colab
the same view is a text box and a menu redrawing a matplotlib heatmap.
"""

from __future__ import annotations

import copy
import html
import math
from collections.abc import Sequence

import torch
from torch import nn

import attention_book as ab

from ..data.text import EOS, UNK
from ..experiments import translation
from .live import MAX_MODEL_BYTES, LiveView
from .live_ch04 import translator_page_data, typed_source

__all__ = [
    "MAX_VIEW_BYTES",
    "DecoderCrossGraph",
    "DecoderSelfGraph",
    "EncoderBlockGraph",
    "TransformerTranslatorView",
    "ch07_live_view",
    "map_choices",
    "pick_map",
    "transformer_reference",
]

# The longest source or target the exported graphs accept (the page pads sources to num_steps).
MAX_STEPS = 64

MAX_VIEW_BYTES = 5 * MAX_MODEL_BYTES
"""All of the view's graphs together (10 MB): more than one graph's limit, as the model is cut
into several, but still less than the 14 MB of the ONNX runtime every live page loads."""


class _TokenEmbedding(nn.Module):
    """Token ids -> embedding x sqrt(d) + positions 0.., as ``TokenStack.embed`` in eval mode.

    It keeps the first :data:`MAX_STEPS` rows of the positional table only: the whole
    table (1000 rows) would be a megabyte of every graph that embeds.
    """

    def __init__(self, stack: nn.Module):
        super().__init__()
        self.embedding, self.scale = stack.embedding, math.sqrt(stack.num_hiddens)
        self.register_buffer("P", stack.pos_encoding.P[:, :MAX_STEPS].clone())

    def forward(self, ids):
        return self.embedding(ids) * self.scale + self.P[:, : ids.shape[1]]


class EncoderBlockGraph(nn.Module):
    """Encoder block ``i`` as a graph: (x, valid_len (1,)) -> x (1, S, d).

    Block 0 takes the source ids (1, S) and embeds them first.
    """

    def __init__(self, encoder: nn.Module, i: int):
        super().__init__()
        self.encoder, self.i = encoder, i
        self.embed = _TokenEmbedding(encoder) if i == 0 else None

    def forward(self, x, valid_len):
        if self.embed is not None:
            x = self.embed(x)
        x = self.encoder.blks[self.i](x, valid_len)
        if self.i == len(self.encoder.blks) - 1:
            x = self.encoder.finish(x)
        return x


class DecoderSelfGraph(nn.Module):
    """The masked self-attention sublayer (with its add & norm) of decoder block ``i``: x -> x (1, T, d).

    Block 0 takes the target ids (1, T), ``<bos>`` first, and embeds them first.
    """

    def __init__(self, decoder: nn.Module, i: int):
        super().__init__()
        self.decoder, self.i = decoder, i
        self.embed = _TokenEmbedding(decoder) if i == 0 else None

    def forward(self, x):
        if self.embed is not None:
            x = self.embed(x)
        block = self.decoder.blks[self.i]
        return block.addnorm1(x, lambda z: block.attention1(z, z, z, None, causal=True))


class DecoderCrossGraph(nn.Module):
    """Encoder-decoder attention and FFN (each with add & norm) of decoder block ``i``.

    (x (1, T, d), enc_outputs (1, S, d), valid_len (1,)) -> (x, cross-attention weights
    (1, heads, T, S)); the last block returns, instead of x, the scores of the token after
    the last position (1, vocab).
    """

    def __init__(self, decoder: nn.Module, i: int):
        super().__init__()
        self.decoder, self.i = decoder, i

    def forward(self, x, enc_outputs, valid_len):
        block = self.decoder.blks[self.i]
        with ab.keep_attention_weights():
            x = block.addnorm2(
                x, lambda z: block.attention2(z, enc_outputs, enc_outputs, valid_len)
            )
        weights = block.attention2.attention_weights
        x = block.addnorm3(x, block.ffn)
        if self.i == len(self.decoder.blks) - 1:
            x = self.decoder.dense(self.decoder.finish(x))[:, -1]
        return x, weights


def map_choices(num_layers: int, num_heads: int) -> list[dict]:
    """The menu of maps: per layer, the average over its heads, then each head (layer, head from 1)."""
    choices = []
    for layer in range(1, num_layers + 1):
        choices.append(
            {
                "label": f"layer {layer}, average of the {num_heads} heads",
                "layer": layer,
                "head": None,
            }
        )
        choices += [
            {"label": f"layer {layer}, head {h}", "layer": layer, "head": h}
            for h in range(1, num_heads + 1)
        ]
    return choices


def pick_map(cross, layer: int, head: int | None) -> torch.Tensor:
    """One map (queries, keys) of ``cross`` (layers, heads, queries, keys): a head, or the heads' mean."""
    cross = torch.as_tensor(cross)
    per_layer = cross[layer - 1]
    return per_layer.mean(dim=0) if head is None else per_layer[head - 1]


def transformer_reference(model: nn.Module, data, sentence: str) -> dict:
    """What the page must show for ``sentence``, computed by the package.

    ``{"source": column labels (the tokens read, ``<eos>`` included, unknown words marked;
    a typed ``<pad>``, ``<bos>`` or ``<eos>`` is an unknown word), "reads": those tokens as
    the model gets them (``<unk>``), "cut": whether the sentence had more than
    ``num_steps`` tokens, "tokens": the greedy French of ``ab.translate`` without
    ``<eos>``, "rows": the row labels, each row's query (decoder input) as in the chapter's
    static figures: ``<bos>``, then the French tokens, "writes": the token each row's step
    writes (the French tokens, then ``<eos>`` if the model wrote it), "cross": the
    encoder-decoder attention weights (layers, heads, rows, columns) of
    ``translation.translation_attention``}``.
    """
    tokens, known, given = typed_source(data, sentence)
    maps = translation.translation_attention(model, data, given)
    read = list(zip(tokens, known))[: data.num_steps]
    output = maps["output"]
    writes = output + ([EOS] if len(output) < data.num_steps else [])
    rows = maps["queries"][: len(writes)]
    return {
        "source": [t if k else f"{t} (unk)" for t, k in read],
        "reads": [t if k else UNK for t, k in read],
        "cut": len(tokens) > data.num_steps,
        "tokens": output,
        "rows": rows,
        "writes": writes,
        "cross": maps["cross"][:, :, : len(rows), : len(read)].tolist(),
    }


def _nbytes(*modules: nn.Module) -> int:
    return 4 * sum(p.numel() for m in modules for p in m.parameters())


class TransformerTranslatorView(LiveView):
    """Type an English sentence; get the Transformer's greedy French and its cross-attention map."""

    name = "ch07.translate"
    module = "ch07.mjs"

    def __init__(self, model: nn.Module, data, examples: Sequence[str] = ()):
        encoder = getattr(model, "encoder", None)
        decoder = getattr(model, "decoder", None)
        if not isinstance(decoder, ab.TransformerDecoder) or not isinstance(
            encoder, ab.TransformerEncoder
        ):
            raise TypeError(
                "the live Transformer needs a model from ab.make_transformer, got "
                f"{type(model).__name__}"
            )
        self.model = copy.deepcopy(model).cpu().eval()
        self.corpus = data
        self.examples = [str(s) for s in examples]

    @property
    def num_layers(self) -> int:
        return len(self.model.decoder.blks)

    def graph_bytes(self) -> dict[str, int]:
        """Each graph's weights in bytes (float32), as :meth:`models` cuts the model."""
        enc, dec = self.model.encoder, self.model.decoder
        # the rows of the positional table that an embedding keeps
        table = 4 * MAX_STEPS * enc.num_hiddens
        sizes = {}
        for i, block in enumerate(enc.blks):
            sizes[f"enc{i}"] = _nbytes(block)
        for i, block in enumerate(dec.blks):
            sizes[f"dec{i}_self"] = _nbytes(block.attention1, block.addnorm1)
            sizes[f"dec{i}_cross"] = _nbytes(
                block.attention2, block.addnorm2, block.ffn, block.addnorm3
            )
        sizes["enc0"] += _nbytes(enc.embedding) + table
        sizes["dec0_self"] += _nbytes(dec.embedding) + table
        last = self.num_layers - 1
        sizes[f"dec{last}_cross"] += _nbytes(dec.dense)
        for name, stack in (
            (f"enc{len(enc.blks) - 1}", enc),
            (f"dec{last}_cross", dec),
        ):
            if stack.final_norm is not None:  # a pre-norm stack's last layer norm
                sizes[name] += _nbytes(stack.final_norm)
        return sizes

    def too_large(self) -> str:
        """Why the page cannot run this model (a graph, or all of them, over the page's limits), or ""."""
        sizes = self.graph_bytes()
        big = {name: size for name, size in sizes.items() if size > MAX_MODEL_BYTES}
        total = sum(sizes.values())
        if not big and total <= MAX_VIEW_BYTES:
            return ""
        why = (
            ", ".join(f"{name} takes {size / 1e6:.1f} MB" for name, size in big.items())
            + f" of a graph's {MAX_MODEL_BYTES / 1e6:.0f} MB"
            if big
            else f"its graphs take {total / 1e6:.1f} MB of {MAX_VIEW_BYTES / 1e6:.0f} MB"
        )
        return (
            f"This Transformer's weights are too big for a page ({why}), so it does not run "
            "here; the player above shows its attention maps."
        )

    def models(self) -> dict:
        if self.too_large():
            return {}  # every reader would download it: the page keeps its translations and says why
        enc, dec = self.model.encoder, self.model.decoder
        S, T, d = self.corpus.num_steps, 3, enc.num_hiddens
        src = torch.zeros(1, S, dtype=torch.long)
        tgt = torch.zeros(1, T, dtype=torch.long)
        valid_len = torch.tensor([S])
        x_src, x_tgt = torch.zeros(1, S, d), torch.zeros(1, T, d)
        s_len = torch.export.Dim("src_len", min=1, max=MAX_STEPS)
        t_len = torch.export.Dim("tgt_len", min=1, max=MAX_STEPS)
        graphs = {}
        for i in range(len(enc.blks)):
            graphs[f"enc{i}"] = (
                EncoderBlockGraph(enc, i).eval(),
                (src if i == 0 else x_src, valid_len),
                ({1: s_len}, None),
                ["enc_x"],
            )
        for i in range(self.num_layers):
            last = i == self.num_layers - 1
            graphs[f"dec{i}_self"] = (
                DecoderSelfGraph(dec, i).eval(),
                (tgt if i == 0 else x_tgt,),
                ({1: t_len},),
                ["dec_x"],
            )
            graphs[f"dec{i}_cross"] = (
                DecoderCrossGraph(dec, i).eval(),
                (x_tgt, x_src, valid_len),
                ({1: t_len}, {1: s_len}, None),
                ["logits" if last else "dec_x", "cross"],
            )
        return graphs

    def data(self) -> dict:
        heads = self.model.decoder.blks[0].attention2.num_heads
        return {
            **translator_page_data(self),
            "enc_layers": len(self.model.encoder.blks),
            "num_layers": self.num_layers,
            "num_heads": heads,
            "choices": map_choices(self.num_layers, heads),
            "examples": self.examples,
        }

    def fallback_html(self) -> str:
        results = (
            ab.translate(self.model, self.corpus, self.examples)
            if self.examples
            else []
        )
        gap = "style='padding:0 1.5em 0 0;text-align:left'"  # columns apart on any theme
        rows = "".join(
            f"<tr><td {gap}>{html.escape(r.source)}</td><td>{html.escape(r.text)}</td></tr>"
            for r in results
        )
        table = (
            f"<table class='ab-live-table'><thead><tr><th {gap}>English</th>"
            "<th style='text-align:left'>the model's French</th></tr></thead>"
            f"<tbody>{rows}</tbody></table>"
            if rows
            else ""
        )
        return (
            "<p>Translations the Transformer wrote when the book was built (their attention "
            f"maps are in the player above):</p>{table}"
        )

    def figure(self, ref: dict, layer: int, head: int | None):
        """The chosen cross-attention map of ``transformer_reference``'s result, labelled with tokens."""
        weights = pick_map(ref["cross"], layer, head)
        which = "average of the heads" if head is None else f"head {head}"
        fig = ab.heatmaps_figure(
            weights.reshape(1, 1, *weights.shape),
            xlabel="key (source token)",
            ylabel="query (decoder input)",
            xticklabels=ref["source"],
            yticklabels=ref["rows"],
            figsize=(4.6, 3.9),
        )
        fig.suptitle(f"encoder–decoder attention, layer {layer}, {which}", fontsize=10)
        return fig

    def widget(self):
        import ipywidgets as widgets
        import matplotlib.pyplot as plt
        from IPython.display import display

        box = widgets.Text(
            value=self.examples[0] if self.examples else "",
            description="English",
            placeholder="type an English sentence",
            continuous_update=False,
        )
        heads = self.model.decoder.blks[0].attention2.num_heads
        options = [
            (c["label"], (c["layer"], c["head"]))
            for c in map_choices(self.num_layers, heads)
        ]
        menu = widgets.Dropdown(
            options=options, value=(self.num_layers, None), description="map"
        )
        out = widgets.Output()

        def show(_=None):
            out.clear_output(wait=True)
            with out:
                if not box.value.strip():
                    print("Type an English sentence (for example: i'm home .)")
                    return
                ref = transformer_reference(self.model, self.corpus, box.value)
                cut = f" (cut to the first {self.corpus.num_steps} tokens)"
                print(
                    "the model reads:",
                    " ".join(ref["reads"]) + (cut if ref["cut"] else ""),
                )
                print("French:", " ".join(ref["tokens"]) or "(empty: <eos> at once)")
                fig = self.figure(ref, *menu.value)
                display(fig)
                plt.close(fig)

        box.observe(show, names="value")
        menu.observe(show, names="value")
        show()
        return widgets.VBox([box, menu, out])


def ch07_live_view(
    model: nn.Module, data, examples: Sequence[str] = ()
) -> TransformerTranslatorView:
    """The live view of chapter 7's trained Transformer (``ab.live(ch07_live_view(model, data))``)."""
    return TransformerTranslatorView(model, data, examples)
