"""Chapter 9, live: the reader types a prompt and the book's decoder-only model continues it.

On the website the trained model runs in the reader's browser (one ONNX graph:
token ids of any length up to the model's context -> scores of the next token)
and ``book/_static/live/ch09.mjs`` does the rest in JavaScript: the tokenizer,
temperature and top-k, the bar chart of the next-token distribution and a seeded
sampler. In Jupyter and Colab the same view is an ipywidgets form that runs the
PyTorch model.

The page must give the numbers the notebook gives, so everything it needs to
agree with the package travels in :meth:`GenerateView.data`: the vocabulary,
the ids that are never sampled, and the few characters whose case folding
(Python's ``str.casefold``) differs from plain lower-casing (JavaScript's
``toLowerCase``), such as ``ß`` -> ``ss``.
"""

from __future__ import annotations

import functools
import html
import sys

import torch
from torch import nn

import attention_book as ab

from ..models.decoding import PUNCTUATION_NAMES, banned_ids, next_token_distribution
from .live import MAX_MODEL_BYTES, LiveView, figure_img

__all__ = [
    "GenerateView",
    "NextTokenScores",
    "casefold_exceptions",
    "ch09_live_view",
    "next_token_probs",
]


class NextTokenScores(nn.Module):
    """A decoder-only model's scores for the token after ``ids`` (1, T) -> (1, vocab).

    Only the last position is returned: that is all sampling reads, and it keeps the
    browser's copy of the output small. The caller crops ``ids`` to the model's
    context (``max_len``), as :func:`attention_book.generate` does.
    """

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.model(ids)[:, -1]


@functools.cache
def casefold_exceptions() -> dict[str, str]:
    """``{code point: str.casefold(ch)}`` for every character where case folding and lower-casing differ.

    Elsewhere the page lower-cases with JavaScript's ``toLowerCase`` (one code point at
    a time, which is what ``casefold`` does), so this table is what makes the two agree.
    """
    table = {}
    for cp in range(sys.maxunicode + 1):
        if 0xD800 <= cp < 0xE000:
            continue
        ch = chr(cp)
        if ch.casefold() != ch.lower():
            table[str(cp)] = ch.casefold()
    return table


def next_token_probs(
    scores: torch.Tensor, tok, temperature: float, top_k: int | None
) -> torch.Tensor:
    """The distribution the package samples the next token from, given one position's ``scores`` (vocab,)."""
    scores = scores.float().clone()
    scores[banned_ids(tok)] = float("-inf")
    return next_token_distribution(scores, temperature, top_k or None)


class GenerateView(LiveView):
    """Type a prompt; the decoder-only model shows its next-token distribution and continues the prompt.

    ``model`` is a trained :class:`attention_book.DecoderOnlyLM` and ``tok`` its word-level
    :class:`attention_book.data.tokenizer.Tokenizer`; ``prompt`` is the example the view opens with.
    """

    name = "ch09.generate"
    module = "ch09.mjs"

    def __init__(
        self,
        model: nn.Module,
        tok,
        prompt: str = "the time traveller",
        examples=("the machine",),
        num_tokens: int = 20,
        show: int = 12,
        seed: int | None = None,
    ):
        if getattr(tok, "level", None) != "word":
            raise ValueError(
                "the chapter 9 live view reads a word-level tokenizer (level='word')"
            )
        if not prompt or not tok.split(prompt):
            raise ValueError(
                f"the example prompt must have at least one token, got {prompt!r}"
            )
        self.model, self.tok = model, tok
        self.prompt, self.examples = prompt, tuple(examples)
        self.num_tokens, self.show = int(num_tokens), int(show)
        self.seed = ab.book_seed() if seed is None else int(seed)

    @property
    def max_len(self) -> int:
        return int(self.model.max_len)

    def weight_bytes(self) -> int:
        """Bytes of the model's float32 weights and buffers: what its ONNX file at least holds."""
        tensors = [*self.model.parameters(), *self.model.buffers()]
        return 4 * sum(t.numel() for t in tensors)

    @property
    def too_large(self) -> str:
        """Why the model cannot run in the page ('' when it can)."""
        if self.weight_bytes() <= MAX_MODEL_BYTES:
            return ""
        return (
            f"This model's weights take {self.weight_bytes() / 1e6:.1f} MB, more than a page may "
            f"load ({MAX_MODEL_BYTES / 1e6:.0f} MB), so it does not run here; the figure above "
            "shows its next-token distribution for the example prompt."
        )

    def models(self) -> dict:
        if self.too_large:
            return {}  # every reader would download it: the page keeps its figure and says why
        model = NextTokenScores(self.model).eval()
        length = min(8, self.max_len)
        ids = torch.tensor([[self.tok.bos_id] + [self.tok.eos_id] * (length - 1)])
        steps = torch.export.Dim("steps", min=1, max=self.max_len)
        return {"next": (model, (ids,), ({1: steps},), ["scores"])}

    def data(self) -> dict:
        tok = self.tok
        return {
            "tokens": list(tok.vocab.idx_to_token),
            "unk": tok.unk_id,
            "bos": tok.bos_id,
            "eos": tok.eos_id,
            "banned": banned_ids(tok),
            "casefold": casefold_exceptions(),
            # what the page's live regions say for "." "," ... (models/decoding.spoken_token)
            "punctuation": PUNCTUATION_NAMES,
            "max_len": self.max_len,
            "prompt": self.prompt,
            "examples": [self.prompt, *self.examples],
            "num_tokens": self.num_tokens,
            "show": self.show,
            "seed": self.seed,
            "too_large": self.too_large,
        }

    def widget(self):
        import ipywidgets as widgets
        from IPython.display import display

        prompt = widgets.Text(
            value=self.prompt, description="prompt", continuous_update=False
        )
        temperature = widgets.FloatSlider(
            value=1.0,
            min=0.0,
            max=2.0,
            step=0.01,
            description="temperature",
            continuous_update=False,
        )
        top_k = widgets.IntSlider(
            value=0,
            min=0,
            max=50,
            description="top-k",
            tooltip="0 = all tokens",
            continuous_update=False,
        )
        seed = widgets.IntText(value=self.seed, description="seed")
        out = widgets.Output()

        def draw(**kw):
            with out:
                out.clear_output(wait=True)
                if not self.tok.split(kw["prompt"]):
                    print(
                        "The prompt has no tokens: type a few words (digits and symbols are dropped)."
                    )
                    return
                fig = ab.sampling_figure(
                    self.model,
                    self.tok,
                    num_tokens=self.num_tokens,
                    show=self.show,
                    **kw,
                )
                display(fig)
                greedy = ab.generate(
                    self.model, self.tok, kw["prompt"], self.num_tokens, temperature=0.0
                )
                print(f"greedy (temperature 0): {kw['prompt']} ▸ {greedy}")

        controls = {
            "prompt": prompt,
            "temperature": temperature,
            "top_k": top_k,
            "seed": seed,
        }
        for control in controls.values():
            control.observe(
                lambda _: draw(**{k: c.value for k, c in controls.items()}),
                names="value",
            )
        draw(**{k: c.value for k, c in controls.items()})
        return widgets.VBox([prompt, temperature, top_k, seed, out])

    def fallback_html(self) -> str:
        fig = ab.sampling_figure(
            self.model,
            self.tok,
            self.prompt,
            1.0,
            0,
            self.seed,
            self.num_tokens,
            self.show,
        )
        img = figure_img(fig, "next-token distribution after the example prompt", dpi=92)
        return (
            f"<p>Next token after “{html.escape(self.prompt)}” at temperature 1 "
            f"(drawn when the book was built):</p>{img}"
        )


def ch09_live_view(model: nn.Module, tok, **kwargs) -> GenerateView:
    """The chapter 9 live view of ``model`` (a trained decoder-only LM) and ``tok`` (see :class:`GenerateView`)."""
    return GenerateView(model, tok, **kwargs)
