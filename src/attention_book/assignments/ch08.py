"""Chapter 8 assignment: cut images into patches with reshape/permute.

The learner writes ``patchify(X, patch_size)`` -> (batch, num_patches, channels * ph * pw).
The checker multiplies the result by the weights of a convolutional
:class:`attention_book.PatchEmbedding` and compares with the convolution's own
output, so the patch order *and* the order inside each patch must match the
convolution's. A wrong answer is compared with what each common mistake gives (the
channel last inside a patch, the patches numbered column by column, a reshape without
a permute, the patch height and width swapped) and the feedback names the mistake made.
"""

from __future__ import annotations

import itertools

import torch

from . import Case, Diagnosis, case_generator, draw, run_checks

__all__ = ["check_patchify"]

# The axes of X.reshape(batch, C, rows, ph, cols, pw) inside one patch, by name, in the convolution's order.
INNER = {1: "C", 3: "ph", 5: "pw"}
RIGHT_INNER = (1, 3, 5)
# The wrong orders, the common ones first: where a size-1 axis makes two orders give the same patches, the
# feedback names the more common mistake (channels-last, as images are stored in PIL and NumPy).
WRONG_INNER = [(3, 5, 1), (1, 5, 3), (5, 3, 1), (3, 1, 5), (5, 1, 3)]
COLUMN_ORDER = ("the patches are numbered column by column: number them row by row (all patches of the top "
                "row first, left to right), the order of the convolution's output flattened")
NO_PERMUTE = ("the image was reshaped straight to (batch, num_patches, C * ph * pw) without moving any axis: a "
              "reshape alone cuts runs of pixels, not ph x pw blocks; split height and width into (patch row, "
              "row within the patch) and (patch column, column within the patch), permute, then reshape")
SWAPPED = ("the patch height and width are swapped: patch_size = (ph, pw) means ph rows of the image (its "
           "height axis, dim 2) by pw columns (its width axis, dim 3)")
DROPPED = ("the output does not hold each pixel exactly once: something is dropped or repeated (check the "
           "sizes given to reshape)")
DTYPE = "return the images' dtype: reshape and permute keep it, so no conversion is needed"
NOT_TENSOR = "return a torch tensor of shape (batch, num_patches, channels * ph * pw)"
TRANSPOSED = ("the last two axes are swapped: one row per patch, shape (batch, num_patches, channels * ph * pw); "
              "a patch's values lie along the last axis")
SHAPE = ("the result must have shape (batch, num_patches, channels * ph * pw) with num_patches = "
         "(height // ph) * (width // pw)")


def _inner_cause(order: tuple[int, ...]) -> str:
    named = ", ".join(INNER[a] for a in order)
    where = ("the channel comes last within a patch (channels-last)" if order[-1] == 1 else
             "the channel is not first within a patch" if order[0] != 1 else
             "the patch's columns come before its rows")
    return (f"{where}: each patch is flattened in the order ({named}), but the convolution's weight is "
            "laid out (C, ph, pw): flatten a patch channel first, then its rows, then its columns")


def _variants(X: torch.Tensor, ph: int, pw: int):
    """(cause, patches) for each common mistake, the simplest mistakes first."""
    b, c, h, w = X.shape
    blocks = X.reshape(b, c, h // ph, ph, w // pw, pw)
    size = c * ph * pw
    found = []
    for patch_axes, inner in itertools.product(((2, 4), (4, 2)), [RIGHT_INNER, *WRONG_INNER]):
        causes = ([COLUMN_ORDER] if patch_axes != (2, 4) else []) + \
                 ([_inner_cause(inner)] if inner != RIGHT_INNER else [])
        if causes:
            patches = blocks.permute(0, *patch_axes, *inner).reshape(b, -1, size)
            found.append((len(causes), "; and ".join(causes), patches))
    found.append((1, NO_PERMUTE, X.reshape(b, -1, size)))
    if h % pw == 0 and w % ph == 0:
        swapped = X.reshape(b, c, h // pw, pw, w // ph, ph).permute(0, 2, 4, 1, 3, 5).reshape(b, -1, size)
        found.append((1, SWAPPED, swapped))
    return [(cause, patches) for _, cause, patches in sorted(found, key=lambda item: item[0])]


def _case(name: str, gen: torch.Generator, channels: int, patch_size, grid: tuple[int, int], hint: str = "") -> Case:
    from ..models.vit import PatchEmbedding

    ph, pw = (patch_size, patch_size) if isinstance(patch_size, int) else patch_size
    b, c, h, w = draw(gen, 1, 3), channels, ph * grid[0], pw * grid[1]
    X = torch.randn((b, c, h, w), generator=gen, dtype=torch.float64)
    emb = PatchEmbedding((h, w), patch_size, num_hiddens=5, in_channels=c).double()
    with torch.no_grad():
        emb.conv.weight.copy_(torch.randn(emb.conv.weight.shape, generator=gen, dtype=torch.float64))
        emb.conv.bias.copy_(torch.randn(emb.conv.bias.shape, generator=gen, dtype=torch.float64))
        expected = emb(X)  # (b, num_patches, 5)
    W = emb.conv.weight.reshape(5, -1)  # (5, c * ph * pw): channel, then row, then column
    needed = (b, (h // ph) * (w // pw), c * ph * pw)
    fallback = hint or ("number the patches row by row; flatten each patch channel first, then its rows, then "
                        "its columns (the layout of conv.weight)")

    def check(got):
        if not isinstance(got, torch.Tensor):
            return Diagnosis(f"expected a tensor of shape {needed}, got {type(got).__name__}", NOT_TENSOR)
        if tuple(got.shape) != needed:
            cause = TRANSPOSED if tuple(got.shape) == (needed[0], needed[2], needed[1]) else SHAPE
            return Diagnosis(f"expected shape (batch, num_patches, channels*ph*pw) = {needed}, got "
                             f"{tuple(got.shape)} — {cause}", cause)
        if got.dtype != X.dtype:
            return Diagnosis(f"expected the images' dtype {X.dtype}, got {got.dtype} — {DTYPE}", DTYPE)
        if not torch.equal(torch.sort(got.detach().reshape(-1)).values, torch.sort(X.reshape(-1)).values):
            return Diagnosis(DROPPED, DROPPED)
        projected = got.detach() @ W.T + emb.conv.bias
        if torch.allclose(projected, expected, atol=1e-9, rtol=1e-9):
            return None
        wrong = (projected - expected).abs().amax(dim=-1) > 1e-9  # (b, num_patches)
        first = wrong.nonzero()[0].tolist()
        why = (f"projected with the convolution's weights, your patches give a different embedding than the "
               f"convolution (first mismatch: example {first[0]}, patch {first[1]}, "
               f"{int(wrong.sum())} of {wrong.numel()} patches wrong)")
        # X is the case's own copy (the call gets a clone), so the mistakes are computed from the true images
        cause = next((cause for cause, patches in _variants(X, ph, pw)
                      if patches.shape == got.shape and torch.equal(got.detach().cpu(), patches)), fallback)
        return Diagnosis(f"{why} — {cause}", cause)

    # No general hint: each failure names its own cause (a crash shows its error).
    return Case(name, args=(X.clone(), patch_size), check=check)


def check_patchify(fn, verbose: bool = True):
    """Check ``fn(X, patch_size)`` against the convolutional patch embedding; every shape and value is
    drawn from the case seed."""
    g = case_generator(8)

    def grid():  # 2 x 2 or more: with one row or one column of patches any order of the patches is right
        return draw(g, 2, 3), draw(g, 2, 3)

    square = draw(g, 2, 4)
    cases = [
        _case("one channel, square patches", g, 1, square, (draw(g, 2, 3), draw(g, 2, 3))),
        _case("several channels, square patches", g, draw(g, 2, 3), draw(g, 2, 3), grid(),
              hint="with several channels each patch vector holds all of channel 0, then all of channel 1, ..."),
        # two channels or more wherever the case is not about one: the order inside a patch always counts
        _case("non-square image and non-square patches", g, draw(g, 2, 3), (draw(g, 3, 4), draw(g, 1, 2)),
              (draw(g, 2, 3), draw(g, 3, 4)),
              hint="use the patch height for the image rows and the patch width for the columns"),
        _case("1x1 patches (every pixel is a token)", g, draw(g, 2, 3), 1, (draw(g, 2, 4), draw(g, 2, 5))),
        _case("one patch covering the whole image", g, draw(g, 2, 3), (draw(g, 2, 6), draw(g, 2, 6)), (1, 1)),
    ]
    return run_checks("patchify", fn, cases, verbose=verbose)
