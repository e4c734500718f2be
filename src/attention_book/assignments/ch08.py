"""Chapter 8 assignment: cut images into patches with reshape/permute.

The learner writes ``patchify(X, patch_size)`` -> (batch, num_patches, channels * ph * pw).
The checker multiplies the result by the weights of a convolutional
:class:`attention_book.PatchEmbedding` and compares with the convolution's own
output, so the patch order *and* the order inside each patch must match the
convolution's.
"""

from __future__ import annotations

import torch

from . import Case, case_generator, draw, run_checks

__all__ = ["check_patchify"]


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

    def check(got):
        if not isinstance(got, torch.Tensor):
            return f"expected a tensor of shape {needed}, got {type(got).__name__}"
        if tuple(got.shape) != needed:
            return (f"expected shape (batch, num_patches, channels*ph*pw) = {needed}, got {tuple(got.shape)}")
        if got.dtype != X.dtype:
            return f"expected the images' dtype {X.dtype}, got {got.dtype}"
        if not torch.equal(torch.sort(got.detach().reshape(-1)).values, torch.sort(X.reshape(-1)).values):
            return "the output does not contain exactly the input's values (each pixel once): something is dropped or repeated"
        projected = got.detach() @ W.T + emb.conv.bias
        if not torch.allclose(projected, expected, atol=1e-9, rtol=1e-9):
            wrong = (projected - expected).abs().amax(dim=-1) > 1e-9  # (b, num_patches)
            first = wrong.nonzero()[0].tolist()
            return (f"projected with the convolution's weights, your patches give a different embedding than the "
                    f"convolution (first mismatch: example {first[0]}, patch {first[1]}, "
                    f"{int(wrong.sum())} of {wrong.numel()} patches wrong)")
        return None

    return Case(name, args=(X.clone(), patch_size), check=check,
                hint=hint or "number the patches row by row; flatten each patch channel first, then its rows, "
                             "then its columns (the layout of conv.weight)")


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
