"""attention_book: the code behind *Attention & Transformers — an interactive book*.

Public names live at the top level, d2l-style::

    import attention_book as ab
    ab.MultiHeadAttention(num_hiddens=64, num_heads=4)

Each concept is defined once, in the module named after it (a test checks that
no two modules export the same name); chapters import it from here. Modules are
listed in reading order: the core shared by every chapter, then one module per
chapter.
"""

# Core: settings, argument checks, plotting, training, data, attention, positions, text, claims, explorers.
from .config import *  # noqa: F401,F403
from .checks import *  # noqa: F401,F403
from .plot import *  # noqa: F401,F403
from .train import *  # noqa: F401,F403
from .data import *  # noqa: F401,F403
from .attention import *  # noqa: F401,F403
from .positional import *  # noqa: F401,F403
from .attention_variants import *  # noqa: F401,F403  (chapter 10's variants; chapter 7's cache uses one)
from .text import *  # noqa: F401,F403
from .claims import *  # noqa: F401,F403
from .explorer import *  # noqa: F401,F403
from .source import *  # noqa: F401,F403
from .diagrams import *  # noqa: F401,F403
from .book.live import live, LiveView  # noqa: F401
from .book.live_ch02 import ch02_live_view  # noqa: F401

# Chapters 1–8.
from .lookup import *  # noqa: F401,F403
from .kernels import *  # noqa: F401,F403
from .scoring import *  # noqa: F401,F403
from .seq2seq import *  # noqa: F401,F403
from .long_inputs import *  # noqa: F401,F403
from .offset_task import *  # noqa: F401,F403
from .layer_comparison import *  # noqa: F401,F403
from .transformer import *  # noqa: F401,F403
from .vit import *  # noqa: F401,F403
# Chapter 9: tokenizer, corpus, objectives, sampling, models, downstream tasks, scaling.
from .tokenizer import *  # noqa: F401,F403
from .corpus import *  # noqa: F401,F403
from .objectives import *  # noqa: F401,F403
from .sampling import *  # noqa: F401,F403
from .lm_models import *  # noqa: F401,F403
from .lm_tasks import *  # noqa: F401,F403
from .scaling import *  # noqa: F401,F403
# Chapter 10: memory measured by tensors, tiled attention, the key/value cache, long contexts.
from .memory import *  # noqa: F401,F403
from .tiled import *  # noqa: F401,F403
from .kv_cache import *  # noqa: F401,F403
from .long_context import *  # noqa: F401,F403

from . import assignments  # noqa: F401

MODULES = ("config", "checks", "plot", "train", "data", "attention", "positional", "attention_variants", "text", "claims", "explorer", "source", "diagrams", "lookup", "kernels",
           "scoring",
           "seq2seq", "long_inputs", "offset_task", "layer_comparison", "transformer", "vit",
           "tokenizer", "corpus", "objectives", "sampling", "lm_models", "lm_tasks", "scaling",
           "memory", "tiled", "kv_cache", "long_context")

__version__ = "0.1.0"
