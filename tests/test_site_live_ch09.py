"""Chapter 9's live view in the built site: a prompt the test chose, continued in Chromium,
against the package's answer for the same prompt.

The page runs the graph the notebook exported into ``_static/live/models/``. The test runs
that very file with onnxruntime (PyPI) behind a stand-in ``nn.Module``, so the package's own
tokenizer (rebuilt as the notebook builds it), ``ab.models.decoding.next_token_distribution`` and
``ab.generate`` give the expected numbers: the next-token distribution after the prompt at the
chosen temperature and top-k (to 1e-4), and the greedy continuation token for token. Run it
after ``make book``; it serves ``_build/html`` on 127.0.0.1 and blocks every other request.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from live_site import HTML, MODELS, LivePage, browser, built_manifest, open_from_file, site  # noqa: F401 (fixtures)
from torch import nn

import attention_book as ab
from attention_book.book.live_ch09 import next_token_probs

pytestmark = pytest.mark.browser

DOC = "notebooks/ch09_pretraining"
NAME = "ch09.generate"
# The test's own prompt: a capital, a word outside the vocabulary, punctuation, extra spaces.
PROMPT = "The   Time Traveller looked at zorblattic Weena ,  and"
TEMPERATURE, TOP_K = 0.7, 7
GREEDY_WORDS = 15


class OnnxLM(nn.Module):
    """The exported graph behind the interface ``ab.generate`` reads: ``model(ids)[:, -1]`` and ``max_len``."""

    def __init__(self, path, max_len: int):
        super().__init__()
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1
        self.session = onnxruntime.InferenceSession(
            str(path), options, providers=["CPUExecutionProvider"]
        )
        self.max_len = max_len
        # generate() reads the device of a parameter
        self.anchor = nn.Parameter(torch.zeros(1))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        assert ids.shape[1] <= self.max_len
        (scores,) = self.session.run(
            None, {self.session.get_inputs()[0].name: ids.numpy()}
        )
        return torch.from_numpy(scores)[:, None, :]


@pytest.fixture(scope="module")
def reference():
    manifest = built_manifest(DOC, "ch09.generate")
    data = manifest["data"]
    # The notebook's tokenizer, built the way the notebook builds it.
    tok = ab.load_corpus(
        level="word", min_freq=3, extra_tokens=("<copy>", "<reverse>"), verbose=False
    ).tokenizer
    assert list(tok.vocab.idx_to_token) == data["tokens"], (
        "the page's vocabulary is not the notebook's"
    )
    model = OnnxLM(MODELS / manifest["models"]["next"]["file"], data["max_len"])
    return tok, model, data


def _settle(live, key: str, expect: dict):
    """Wait until the view has finished and its ``data-<key>`` JSON holds ``expect``; return that JSON."""
    live.page.wait_for_function(
        """([sel, key, expect]) => {
            const root = document.querySelector(sel);
            if (!root || root.dataset.busy !== 'false' || !root.dataset[key]) return false;
            const got = JSON.parse(root.dataset[key]);
            return Object.entries(expect).every(([k, v]) => JSON.stringify(got[k]) === JSON.stringify(v));
        }""",
        arg=[live.root, key, expect],
    )
    return json.loads(live.page.get_attribute(live.root, f"data-{key}"))


def _wait(live, condition: str) -> None:
    """Wait until ``condition`` (JavaScript over the view's root ``r``) holds and the view is idle."""
    live.page.wait_for_function(
        f"(root) => {{ const r = document.querySelector(root); return r.dataset.busy === 'false' && ({condition}); }}",
        arg=live.root,
    )


def test_chapter9_live_view_matches_the_package(site, browser, reference):  # noqa: F811
    tok, model, data = reference
    assert PROMPT not in data["examples"]
    prompt_ids = tok.encode(PROMPT)
    assert tok.unk_id in prompt_ids, (
        "the test's prompt should hold a word outside the vocabulary"
    )
    with LivePage(browser, site, DOC, NAME) as live:
        state = live.start()
        print("time to first result (ms):", state["firstResultMs"])
        root = live.root

        # The next-token distribution after the test's prompt, at its temperature and top-k.
        # The first prompt's continuation is on the page; a new prompt clears it at once.
        assert live.dataset().get("continuation")
        live.page.fill(f'{root} [name="prompt"]', PROMPT)
        assert not live.dataset().get("continuation")
        assert "press Generate" in live.page.inner_text(f"{root} .ab-text")
        live.set_value('[name="top_k"]', TOP_K)
        live.set_value('[name="temperature"]', TEMPERATURE)
        shown = _settle(
            live,
            "distribution",
            {"prompt": PROMPT, "temperature": TEMPERATURE, "top_k": TOP_K},
        )
        assert shown["ids"] == prompt_ids
        unk_shown = live.page.locator(f"{root} .ab-tokens .ab-unk").all_inner_texts()
        assert unk_shown == ["<unk>"] * prompt_ids.count(tok.unk_id)
        ids = torch.tensor([[tok.bos_id] + prompt_ids])[:, -model.max_len :]
        with torch.no_grad():
            want = next_token_probs(model(ids)[0, -1], tok, TEMPERATURE, TOP_K)
        got = np.array(
            live.page.eval_on_selector(root, "r => Array.from(r.abProbabilities)")
        )
        np.testing.assert_allclose(got, want.numpy(), atol=1e-4, rtol=0)
        assert sorted(i for i, _ in shown["top"]) == sorted(
            torch.nonzero(want).flatten().tolist()
        )
        for i, p in shown["top"]:
            assert abs(p - float(want[i])) <= 1e-4

        # Greedy continuation (temperature 0): token for token what ab.generate gives.
        live.set_value('[name="temperature"]', 0)
        live.set_value('[name="num_tokens"]', GREEDY_WORDS)
        live.page.click(f'{root} [name="generate"]')
        greedy = _settle(
            live,
            "continuation",
            {"prompt": PROMPT, "temperature": 0, "count": GREEDY_WORDS},
        )
        expected = ab.generate(
            model, tok, PROMPT, num_tokens=GREEDY_WORDS, temperature=0.0
        )
        assert tok.decode(greedy["ids"]) == expected
        assert greedy["text"] == expected

        # A sample with a seed: the same seed gives the same words, each within the top-k.
        live.set_value('[name="temperature"]', 1.2)
        live.set_value('[name="top_k"]', 5)
        live.set_value('[name="seed"]', 11)
        live.page.click(f'{root} [name="generate"]')
        first = _settle(
            live, "continuation", {"temperature": 1.2, "top_k": 5, "seed": 11}
        )
        live.page.eval_on_selector(root, "r => { r.dataset.continuation = ''; }")
        live.page.click(f'{root} [name="generate"]')
        again = _settle(
            live, "continuation", {"temperature": 1.2, "top_k": 5, "seed": 11}
        )
        assert first["ids"] == again["ids"]
        so_far = [tok.bos_id] + prompt_ids
        for nxt in first["ids"]:
            with torch.no_grad():
                scores = model(torch.tensor([so_far[-model.max_len :]]))[0, -1]
            assert next_token_probs(scores, tok, 1.2, 5)[nxt] > 0, (
                f"{tok.vocab.to_tokens(nxt)!r} is outside the top 5"
            )
            so_far.append(nxt)

        # Step appends one word to the prompt.
        live.page.click(f'{root} [name="step"]')
        _wait(live, f"r.querySelector('[name=prompt]').value.length > {len(PROMPT)}")
        stepped = live.page.input_value(f'{root} [name="prompt"]')
        assert len(tok.encode(stepped)) == len(prompt_ids) + 1

        # A prompt with no tokens: a message, no distribution, no error.
        live.page.fill(f'{root} [name="prompt"]', "  42 — #  ")
        _wait(live, "r.dataset.distribution === ''")
        assert "no tokens" in live.page.inner_text(f"{root} .ab-message")
        print("per-step latency (ms):", live.dataset()["lastStepMs"])
        assert live.events == []


def test_chapter9_live_view_from_file_keeps_its_frame(browser, reference):  # noqa: F811
    shown = open_from_file(browser, DOC, NAME)
    assert shown["state"] == "file"
    assert "python -m http.server -d _build/html" in shown["note"]
    assert shown["fallback_shown"] and shown["fallback_images"] >= 1


# Everything the view drew, measured against its own box (the page's column): how far the
# furthest element reaches past its right edge, in px.
OVERFLOW = """(root) => {
    const r = document.querySelector(root);
    const edge = r.getBoundingClientRect().right;
    let worst = 0;
    for (const e of r.querySelectorAll('.ab-ch09 *')) {
        const box = e.getBoundingClientRect();
        if (box.width) worst = Math.max(worst, box.right - edge);
    }
    return worst;
}"""


def test_chapter9_live_view_wraps_and_says_what_it_cuts(site, browser, reference):  # noqa: F811
    """A fresh learner (issue 36): a 15-word prompt made the view 583 px wide in a 358 px
    column; a prompt past the context was cut silently; Step said "The prompt changed";
    an empty prompt left the last "Next word at temperature ..." summary standing."""
    from test_site import DESKTOP, PHONE

    tok, model, data = reference
    fifteen = "the time traveller looked at us and smiled , and the moon was rising over"
    phrase = "the time traveller looked at the machine and "
    long = (phrase * (data["max_len"] // 8 + 3)).strip()
    n_long = len(tok.encode(long))
    assert n_long > data["max_len"]
    with LivePage(browser, site, DOC, NAME) as live:
        live.start()
        root = live.root
        for size in (PHONE, DESKTOP):
            live.page.set_viewport_size(size)
            for text in (fifteen, long):
                live.page.fill(f'{root} [name="prompt"]', text)
                _settle(live, "distribution", {"prompt": text})
                over = live.page.evaluate(OVERFLOW, root)
                assert over <= 1, f"{size['width']} px, {text[:30]!r}: {over:.0f} px past the column"
        message = live.page.inner_text(f"{root} .ab-message")
        assert "cut" in message and str(data["max_len"]) in message, message
        # said with <bos> named (issue 38: read "less than bos greater than"), shown as written
        heard = live.page.eval_on_selector(f"{root} .ab-message", HEARD)
        assert "start of sentence" in heard and "<bos>" not in heard and "<bos>" in message, heard
        struck = live.page.locator(f"{root} .ab-tokens .ab-cut").count()
        assert struck == n_long - data["max_len"]

        live.page.fill(f'{root} [name="prompt"]', fifteen)
        _settle(live, "distribution", {"prompt": fifteen})
        assert live.page.inner_text(f"{root} .ab-message") == ""
        assert live.page.locator(f"{root} .ab-tokens .ab-cut").count() == 0
        live.page.click(f'{root} [name="step"]')
        _wait(live, f"r.querySelector('[name=prompt]').value.length > {len(fifteen)}")
        after_step = live.page.inner_text(f"{root} .ab-text")
        assert "prompt changed" not in after_step and "Step added" in after_step, after_step

        assert live.page.text_content(f"{root} .ab-said").startswith("Next word")
        live.page.fill(f'{root} [name="prompt"]', "  42 — #  ")
        _wait(live, "r.dataset.distribution === ''")
        assert live.page.text_content(f"{root} .ab-said") == ""
        assert live.events == []


def test_enter_writes_and_a_repeated_text_is_said_again(site, browser):  # noqa: F811
    """A keyboard/screen-reader reader: Enter in the prompt did nothing, and Generate pressed twice
    with the same seed wrote the same text, so the live region did not change and nothing was read.
    Enter now generates; a repeat says it is the same text and why."""
    with LivePage(browser, site, DOC, NAME) as live:
        live.start()
        root = live.root
        live.page.fill(f'{root} [name="prompt"]', "the time traveller said")
        assert "press Generate" in live.page.inner_text(f"{root} .ab-text")
        live.page.press(f'{root} [name="prompt"]', "Enter")
        first = _settle(live, "continuation", {"prompt": "the time traveller said"})
        shown = live.page.inner_text(f"{root} .ab-text")
        assert first["text"] in shown and "same text again" not in shown, shown
        for times in (2, 3):  # the same seed, pressed again: the same words, said in a new sentence
            live.page.click(f'{root} [name="generate"]')
            _wait(live, f"r.querySelector('.ab-text').textContent.includes('({times} times)')")
            again = live.page.inner_text(f"{root} .ab-text")
            assert first["text"] in again and f"same text again ({times} times)" in again, again
        assert live.events == []


def test_top_k_zero_is_said_as_all(site, browser):  # noqa: F811
    """Issue 38: the top-k field said "0" where 0 keeps every token: it says "all" (its value
    text and description, and a word beside it), and the number otherwise."""
    with LivePage(browser, site, DOC, NAME) as live:
        live.start()
        field = live.page.locator(f'{live.root} [name="top_k"]')
        label = field.locator("xpath=..")
        assert field.get_attribute("aria-valuetext") == "all tokens (0)"
        assert field.get_attribute("aria-description") == "all tokens are kept"
        assert label.text_content().strip() == "top-k all"
        live.set_value('[name="top_k"]', 5)
        assert field.get_attribute("aria-valuetext") == "5" and label.text_content().strip() == "top-k"
        assert live.events == []


# The text of a live region a screen reader reads: everything but what is aria-hidden.
HEARD = """(region) => {
    const copy = region.cloneNode(true);
    copy.querySelectorAll('[aria-hidden=true]').forEach((e) => e.remove());
    return copy.textContent;
}"""


def test_tokens_are_said_apart(site, browser, reference):  # noqa: F811
    """An accessibility reader (issue 38) heard "top-k all: . 0.224, , 0.165, and 0.059", "the
    machine ▸ , (sampled with seed 0)" and "1 new words": tokens are quoted and punctuation named
    (ab.models.decoding.spoken_token), "▸" is said "then", and one word is singular."""
    from attention_book.models.decoding import spoken_text, spoken_token

    tok = reference[0]
    with LivePage(browser, site, DOC, NAME) as live:
        live.start()
        root = live.root
        live.page.fill(f'{root} [name="prompt"]', "the machine")
        shown = _settle(live, "distribution", {"prompt": "the machine"})
        top = [tok.vocab.to_tokens(i) for i, p in shown["top"][:3] if p > 0]
        said = live.page.text_content(f"{root} .ab-said")
        want = ", ".join(f"{spoken_token(t)} {p:.3f}" for t, (_, p) in zip(top, shown["top"]))
        assert said == f"Next word at temperature 1.00, top-k all: {want}.", said
        live.page.press(f'{root} [name="prompt"]', "Enter")
        out = _settle(live, "continuation", {"prompt": "the machine"})
        # What a screen reader reads of the region (all but its aria-hidden text): whole sentences,
        # each ended and spaced; an accessibility reader heard two run together ("...0.274Top").
        continued = [spoken_text(out["text"])] * bool(out["text"]) + ["end of text"] * out["stopped"]
        want = f"the machine, then: {', '.join(continued)}. Sampled with seed {out['seed']}. "
        assert live.page.eval_on_selector(f"{root} .ab-text", HEARD) == want
        assert live.page.text_content(f"{root} .ab-text .ab-sr") == want
        assert "▸" in live.page.inner_text(f"{root} .ab-text [aria-hidden=true]")
        # The accessibility tree (what a screen reader reads and the live region announces) holds
        # the spoken text alone: the reader's probe heard the visible copy too (issue 38).
        tree = live.page.locator(f"{root} .ab-text").aria_snapshot()
        assert "▸" not in tree and "sampled with seed" not in tree, tree
        # Nor does the region's whole text (the hidden "prompt ▸ continuation" after the spoken one).
        region = live.page.text_content(f"{root} .ab-text")
        assert region.startswith(want) and not re.search(r"[\w.)][A-Z]", region), region
        live.page.click(f'{root} [name="generate"]')  # the same seed again: one more sentence
        _wait(live, "r.querySelector('.ab-text').textContent.includes('(2 times)')")
        again = f"The same text again (2 times): seed {out['seed']} draws the same words; change the seed for others. "
        assert live.page.eval_on_selector(f"{root} .ab-text", HEARD) == want + again
        live.set_value('[name="num_tokens"]', 1)
        assert live.page.text_content(f"{root} .ab-said") == "1 new word: press Generate to write it."
        assert live.events == []
