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


def _counting(embed_model, monkeypatch) -> list[int]:
    """How many texts each call of the weights (SentenceTransformer.encode) was given, from now on."""
    embed_model.forget()  # the session's model may have embedded these texts in an earlier test
    model = embed_model._model
    sizes: list[int] = []
    encode = type(model).encode

    def counted(self, sentences, *args, **kwargs):
        sizes.append(len(sentences) if isinstance(sentences, list) else 1)
        return encode(self, sentences, *args, **kwargs)

    monkeypatch.setattr(type(model), "encode", counted)
    return sizes


def test_a_question_embedded_alone_is_embedded_once_and_searched_with_the_same_vector(embed_model, monkeypatch) -> None:
    import numpy as np

    from crag_lab.kb._embedding import unit_embedding
    from crag_lab.offline.vectors import VectorCache

    sizes = _counting(embed_model, monkeypatch)
    question = "Which port does the memo test's gateway listen on, exactly?"
    read = VectorCache(embed_model).query(question)  # the offline model routes and reads with this vector
    searched = unit_embedding(embed_model).get_query_embedding(question)  # the retriever searches with this one
    assert sizes == [1]
    # What is remembered is equal to the last bit to what the weights give when asked again.
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    fresh = HuggingFaceEmbedding._embed(embed_model, [question], prompt_name="query")[0]
    assert sizes == [1, 1]
    assert embed_model._get_query_embedding(question) == fresh
    assert np.allclose(read, searched, atol=1e-6)


def test_batches_of_several_texts_are_never_remembered_and_forget_forgets_the_rest(embed_model, monkeypatch) -> None:
    sizes = _counting(embed_model, monkeypatch)
    texts = ["memo test: the first of two", "memo test: the second of two"]
    embed_model.get_text_embedding_batch(texts)
    embed_model.get_text_embedding_batch(texts)
    embed_model.get_text_embedding(texts[0])  # alone: not what the batch gave (padding), so the model runs
    embed_model.get_text_embedding(texts[0])
    embed_model.forget()
    embed_model.get_text_embedding(texts[0])
    assert sizes == [2, 2, 1, 1]


def test_the_remembering_model_still_pickles(embed_model) -> None:
    import pickle

    embed_model.get_query_embedding("memo test: pickled after one question")
    copy = pickle.loads(pickle.dumps(embed_model))
    assert copy.get_query_embedding("memo test: pickled after one question") == \
        embed_model.get_query_embedding("memo test: pickled after one question")


def test_a_later_session_searches_with_the_question_vector_an_earlier_one_stored(embed_model, monkeypatch,
                                                                                tmp_path) -> None:
    from llama_index.embeddings.huggingface import HuggingFaceEmbedding

    from crag_lab.offline.vectors import STORE_FILE, VectorCache

    question = "memo test: which port does the stored gateway listen on?"
    VectorCache(embed_model, store=tmp_path / STORE_FILE, model_name="minilm").query(question)
    sizes = _counting(embed_model, monkeypatch)  # a new session: the model remembers nothing
    VectorCache(embed_model, store=tmp_path / STORE_FILE, model_name="minilm").query(question)  # from the store
    searched = embed_model._get_query_embedding(question)
    assert sizes == []
    assert searched == HuggingFaceEmbedding._embed(embed_model, [question], prompt_name="query")[0]
    assert sizes == [1]
