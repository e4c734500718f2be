"""Chapter 4's live view: the reader types English, the trained translator answers in French.

On the website the page runs two ONNX graphs cut from the notebook's model: the
encoder (read the padded source once) and one decoder step (previous token,
hidden state, encoder outputs, source length -> scores for the next token, the
new hidden state and the attention weights of that step). ``ch04.mjs`` repeats
the package's preprocessing and greedy decoding around them, so a typed sentence
gets the very tokens and alignment that ``ab.translate`` gives in Python. In
Jupyter or Colab the same view is a text box redrawing ``ab.experiments.translation.alignment_figure``.
"""

from __future__ import annotations

import copy
import html
import os
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

import attention_book as ab

from ..core.config import frames_dir
from ..data.text import BOS, EOS, PAD, UNK, preprocess_nmt, tokenize_nmt
from .live import MAX_MODEL_BYTES, LiveView

__all__ = [
    "DecoderStepGraph",
    "SourceEncoderGraph",
    "TranslatorView",
    "ch04_live_view",
    "reference_translation",
    "save_reference",
    "translator_page_data",
    "typed_source",
]

# The longest source the exported graphs accept (the page pads to the model's num_steps).
MAX_SOURCE_STEPS = 64


class SourceEncoderGraph(nn.Module):
    """The encoder as one graph: source ids (1, T) -> (outputs (1, T, h), final states (1, layers, h))."""

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder

    def forward(self, src):
        outputs, hidden = self.encoder(src)
        # Slicing to the input's length keeps T symbolic in the exported output's shape
        # (the recurrent layer's own shape record holds the example's length).
        return outputs[:, : src.shape[1]], hidden


class DecoderStepGraph(nn.Module):
    """One greedy step of the attention decoder as a graph.

    Inputs: the previous token (1, 1), the decoder's hidden state (1, layers, h),
    the encoder outputs (1, T, h) and the source's valid length (1,). Outputs: the
    scores of the next token (1, vocab), the new hidden state, and the attention
    weights of this step over the T source positions (1, T).
    """

    def __init__(self, decoder: nn.Module):
        super().__init__()
        self.decoder = decoder

    def forward(self, token, hidden, enc_outputs, valid_len):
        with ab.keep_attention_weights():
            logits, (_, new_hidden, _) = self.decoder(
                token, (enc_outputs, hidden, valid_len)
            )
        return logits[:, -1], new_hidden, self.decoder.attention_weights[-1][:, 0]


# Control tokens: typed by the reader, they are words the vocabulary does not know.
CONTROL_TOKENS = (PAD, BOS, EOS)


def typed_source(data, sentence: str) -> tuple[list[str], list[bool], str]:
    """The tokens of ``sentence`` (``<eos>`` appended), whether the model knows each, and the
    sentence it is given.

    Only the ``<eos>`` the tokenizer appends ends the sentence: a ``<pad>``, ``<bos>`` or
    ``<eos>`` the reader typed is an unknown word, given to the model as ``<unk>``.
    """
    tokens = tokenize_nmt(preprocess_nmt(sentence))
    typed = tokens[:-1]
    known = [
        t in data.src_vocab.token_to_idx and t not in CONTROL_TOKENS for t in typed
    ] + [True]
    if any(t in CONTROL_TOKENS for t in typed):
        sentence = " ".join(UNK if t in CONTROL_TOKENS else t for t in typed)
    return tokens, known, sentence


def translator_page_data(view) -> dict:
    """What a translator's live page needs besides its graphs (chapters 4 and 7): the two
    vocabularies, the lengths, the special tokens' ids and the typed words read as unknown.
    Saves the model's weights for the browser test when frames are kept."""
    frames = frames_dir()
    if frames is not None:  # the browser test decodes with the very same weights
        save_reference(view.model, view.corpus, frames / "live" / f"{view.name}.pt")
    src_vocab, tgt_vocab = view.corpus.src_vocab, view.corpus.tgt_vocab
    return {
        "too_large": view.too_large(),
        "src_vocab": src_vocab.idx_to_token,
        "tgt_vocab": tgt_vocab.idx_to_token,
        "num_steps": view.corpus.num_steps,
        "max_steps": view.corpus.num_steps,  # ab.translate's default
        "pad": src_vocab[PAD],
        "bos": tgt_vocab[BOS],
        "eos": tgt_vocab[EOS],
        "control_tokens": list(CONTROL_TOKENS),  # typed, they are unknown words
    }


def reference_translation(model: nn.Module, data, sentence: str) -> dict:
    """What the page must show for ``sentence``, computed by the package (``ab.translate``, greedy).

    ``{"source": column labels, "reads": the source tokens the model gets
    (unknown words as <unk>, at most ``data.num_steps`` of them; a typed ``<pad>``,
    ``<bos>`` or ``<eos>`` is an unknown word, see :func:`typed_source`), "cut": whether the
    sentence had more tokens than that (the view says so), "tokens": the French tokens without <eos>, "rows":
    the heatmap's row labels (those tokens, then <eos> if the model wrote it),
    "attention": one list of weights over the source labels per row}``.
    """
    tokens, known, given = typed_source(data, sentence)
    (result,) = ab.translate(model, data, [given], save_attention=True)
    read = list(zip(tokens, known))[: data.num_steps]
    source = [t if k else f"{t} (unk)" for t, k in read]
    reads = [t if k else UNK for t, k in read]
    rows = result.tokens + (
        [EOS] if result.attention.shape[0] > len(result.tokens) else []
    )
    weights = result.attention[: len(rows), : len(source)]
    return {
        "source": source,
        "reads": reads,
        "cut": len(tokens) > data.num_steps,
        "tokens": result.tokens,
        "rows": rows,
        "attention": weights.tolist(),
    }


def save_reference(model: nn.Module, data, path: str | os.PathLike) -> Path:
    """Pickle the model and its data for the browser test (``torch.load(path, weights_only=False)``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"model": copy.deepcopy(model).cpu().eval(), "data": data}, path)
    return path


class TranslatorView(LiveView):
    """Type an English sentence; get the translator's greedy French and its alignment heatmap."""

    name = "ch04.translate"
    module = "ch04.mjs"

    def __init__(self, model: nn.Module, data, examples: Sequence[str] = ()):
        decoder = getattr(model, "decoder", None)
        if not isinstance(decoder, ab.Seq2SeqAttentionDecoder) or decoder.cell != "gru":
            raise ValueError(
                "the live translator needs a model from translation.train_translator with attention and a GRU "
                f"cell (ab.make_seq2seq(..., cell='gru', attention=...)), got {type(model).__name__}"
            )
        self.model = copy.deepcopy(model).cpu().eval()
        self.corpus = data
        self.examples = [str(s) for s in examples]

    def too_large(self) -> str:
        """Why the page cannot run this model (a graph's weights over the page's limit), or ""."""
        sizes = {
            name: 4 * sum(p.numel() for p in part.parameters())
            for name, part in (
                ("encoder", self.model.encoder),
                ("decoder", self.model.decoder),
            )
        }
        big = {name: size for name, size in sizes.items() if size > MAX_MODEL_BYTES}
        if not big:
            return ""
        parts = ", ".join(
            f"the {name}'s take {size / 1e6:.1f} MB" for name, size in big.items()
        )
        return (
            f"This translator's weights are too big for a page ({parts}; a page may load "
            f"{MAX_MODEL_BYTES / 1e6:.0f} MB a graph), so it does not run here; the player above "
            "shows its alignment maps."
        )

    def models(self) -> dict:
        if self.too_large():
            return {}  # every reader would download it: the page keeps its translations and says why
        src = torch.zeros(1, self.corpus.num_steps, dtype=torch.long)
        with torch.no_grad():
            enc_outputs, hidden = self.model.encoder(src)
        token = torch.tensor([[self.corpus.tgt_vocab[BOS]]])
        valid_len = torch.tensor([self.corpus.num_steps])
        length = torch.export.Dim("src_len", min=1, max=MAX_SOURCE_STEPS)
        return {
            "encoder": (
                SourceEncoderGraph(self.model.encoder).eval(),
                (src,),
                ({1: length},),
                ["enc_outputs", "hidden"],
            ),
            "step": (
                DecoderStepGraph(self.model.decoder).eval(),
                (token, hidden, enc_outputs, valid_len),
                (None, None, {1: length}, None),
                ["logits", "new_hidden", "attention"],
            ),
        }

    def data(self) -> dict:
        return {**translator_page_data(self), "examples": self.examples}

    def _translations(self) -> list[tuple[str, str]]:
        results = (
            ab.translate(self.model, self.corpus, self.examples)
            if self.examples
            else []
        )
        return [(r.source, r.text) for r in results]

    def fallback_html(self) -> str:
        rows = "".join(
            f"<tr><td>{html.escape(en)}</td><td>{html.escape(fr)}</td></tr>"
            for en, fr in self._translations()
        )
        table = (
            (
                f"<table class='ab-live-table'><thead><tr><th>English</th><th>the model's French</th></tr></thead>"
                f"<tbody>{rows}</tbody></table>"
            )
            if rows
            else ""
        )
        return (
            "<p>Translations the model wrote when the book was built (their alignment maps are in the "
            f"player above):</p>{table}"
        )

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
        out = widgets.Output()

        def show(_=None):
            out.clear_output(wait=True)
            with out:
                if not box.value.strip():
                    print("Type an English sentence (for example: i'm home .)")
                    return
                ref = reference_translation(self.model, self.corpus, box.value)
                cut = self.corpus.num_steps
                note = f" (cut to the first {cut} tokens: it reads no more)"
                print("the model reads:", " ".join(ref["reads"]) + (note if ref["cut"] else ""))
                _, _, given = typed_source(self.corpus, box.value)
                fig = ab.experiments.translation.alignment_figure(
                    self.model, self.corpus, given
                )
                display(fig)
                plt.close(fig)

        box.observe(show, names="value")
        show()
        return widgets.VBox([box, out])


def ch04_live_view(
    model: nn.Module, data, examples: Sequence[str] = ()
) -> TranslatorView:
    """The live view of a trained attention translator (``ab.live(ch04_live_view(model, data))``)."""
    return TranslatorView(model, data, examples)
