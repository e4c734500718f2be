"""Data: the registry of verified downloads (registry), the English–French pairs and their
vocabularies (text), the tokenizer and corpus of chapter 9, and the image sets of chapter 8
(images).

Imports only from ``core``."""
