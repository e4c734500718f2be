"""attention_book: the code behind *Attention & Transformers — an interactive book*.

Public names live at the top level, d2l-style::

    import attention_book as ab
    ab.MultiHeadAttention(num_hiddens=64, num_heads=4)

Each concept is defined once, in the module named after it; chapters import it
from here. Modules are listed in reading order.
"""

from .config import *  # noqa: F401,F403
from .plot import *  # noqa: F401,F403
from .train import *  # noqa: F401,F403
from .data import *  # noqa: F401,F403
from .attention import *  # noqa: F401,F403
from .positional import *  # noqa: F401,F403
from .text import *  # noqa: F401,F403
from . import assignments  # noqa: F401

# Chapter modules: each one is optional while the book is being written, so a
# missing module never breaks the chapters that do not need it.
import importlib as _importlib

for _name in ("lookup", "kernels", "scoring", "seq2seq", "heads", "selfattention", "transformer", "vit",
              "pretraining", "widgets"):
    try:
        _module = _importlib.import_module(f".{_name}", __name__)
    except ModuleNotFoundError as _err:
        if _err.name != f"{__name__}.{_name}":
            raise
        continue
    for _public in getattr(_module, "__all__", ()):
        globals()[_public] = getattr(_module, _public)

__version__ = "0.1.0"
