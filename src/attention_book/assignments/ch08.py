"""Chapter 8 assignment: cut images into patches with reshape/permute.

The learner writes ``patchify(X, patch_size)`` -> (batch, num_patches, channels * ph * pw).
The checker multiplies the result by the weights of a convolutional
:class:`attention_book.PatchEmbedding` and compares with the convolution's own
output, so the patch order *and* the order inside each patch must match the
convolution's.
"""

from __future__ import annotations

import torch

from . import Case, case_seed, run_checks

__all__ = ["check_patchify"]


def _case(name: str, shape: tuple[int, int, int, int], patch_size, seed: int, hint: str = "") -> Case:
    from ..core.checks import check_size_pair
    from ..models.vit import PatchEmbedding

    b, c, h, w = shape
    ph, pw = check_size_pair("patch_size", patch_size)
    gen = torch.Generator().manual_seed(case_seed(seed))
    X = torch.randn(shape, generator=gen, dtype=torch.float64)
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
        if not torch.equal(torch.sort(got.detach().reshape(-1)).values.to(X.dtype), torch.sort(X.reshape(-1)).values):
            return "the output does not contain exactly the input's values (each pixel once): something is dropped or repeated"
        projected = got.detach().to(X.dtype) @ W.T + emb.conv.bias
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
    """Check ``fn(X, patch_size)`` against the convolutional patch embedding on several shapes."""
    cases = [
        _case("one channel, 8x8 image, 4x4 patches", (2, 1, 8, 8), 4, seed=0),
        _case("three channels, 6x6 image, 2x2 patches", (2, 3, 6, 6), 2, seed=1,
              hint="with several channels each patch vector holds all of channel 0, then all of channel 1, ..."),
        _case("non-square image 8x12, non-square patches (4, 3)", (1, 2, 8, 12), (4, 3), seed=2,
              hint="use the patch height for the image rows and the patch width for the columns"),
        _case("1x1 patches (every pixel is a token)", (2, 2, 3, 5), 1, seed=3),
        _case("one patch covering the whole 6x10 image", (3, 1, 6, 10), (6, 10), seed=4),
    ]
    return run_checks("patchify", fn, cases, verbose=verbose)
