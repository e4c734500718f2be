"""The building blocks the chapters teach: attention and its scoring functions, kernels,
positions, the variants of chapter 10, Transformer blocks, seq2seq models, the vision
Transformer, language models and their objectives, decoding, the key/value cache and tiled
attention.

Imports only from ``core`` and ``data``: never an experiment or the book's machinery."""
