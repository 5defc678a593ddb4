"""The bundled embedding model (crag_lab/embeddings.py)."""

from __future__ import annotations

from crag_lab.embeddings import token_lengths


def test_token_lengths_count_what_the_model_reads(embed_model) -> None:
    long = "gateway " * 400
    # [CLS] and [SEP] count; the model truncates at 256 tokens, and so does the count.
    assert token_lengths(embed_model, ["port", "", long]) == [3, 2, 256]


def test_token_lengths_are_none_for_a_model_without_a_tokenizer(hash_embed_model, embed_model) -> None:
    assert token_lengths(hash_embed_model, ["port"]) is None
    assert token_lengths(embed_model, []) is None
