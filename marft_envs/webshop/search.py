"""BM25 product search (``bm25s``), configured like the original's Lucene index.

The original indexed, per product, ``title + description + first bullet + option text``
(lower-cased) with Pyserini/Lucene (BM25, k1 = 0.9, b = 0.4, English stop words, Porter
stemming) and returned the top 50 hits. This module builds the same documents
(:meth:`Product.search_text`) and scores them with ``bm25s`` in Lucene mode, the 33 Lucene
English stop words and the Porter stemmer of PyStemmer.

Reproducibility: scores are computed for every document and ranked with a *stable* sort on
``(-score, catalog position)``, so ties always resolve by catalog order and the same query gives
the same list on every platform. Only documents with a positive score are returned (Lucene
returns no non-matching documents either).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import bm25s
import numpy as np

from marft_envs.webshop.schema import Product

SEARCH_RETURN_N = 50
"""Results per query (the original's ``SEARCH_RETURN_N``)."""


@dataclass(frozen=True)
class SearchConfig:
    """BM25 settings."""

    k1: float = 0.9
    """Term-frequency saturation (Pyserini's default)."""
    b: float = 0.4
    """Length normalisation (Pyserini's default)."""
    stemmer: str | None = "porter"
    """PyStemmer algorithm (``"porter"`` is Lucene's ``PorterStemFilter``; ``None``: no stemming)."""
    top_k: int = SEARCH_RETURN_N
    """How many hits a search returns."""
    max_query_chars: int = 1_000
    """Longer queries are cut before tokenising (a 100,000-character query costs no more)."""


def _stem_function(name: str | None):
    if name is None:
        return None
    try:
        import Stemmer  # PyStemmer
    except ImportError as err:  # pragma: no cover - depends on the install
        raise ImportError(
            "WebShop search stems words like the original Lucene index and needs PyStemmer: "
            "pip install 'PyStemmer>=2.2' (or pass SearchConfig(stemmer=None) to index without stemming)"
        ) from err
    if name not in Stemmer.algorithms():
        raise ValueError(f"unknown stemmer {name!r}; PyStemmer offers {sorted(Stemmer.algorithms())}")
    return Stemmer.Stemmer(name).stemWords


class SearchEngine:
    """A BM25 index over a list of products."""

    def __init__(self, products: Sequence[Product], config: SearchConfig | None = None):
        if not products:
            raise ValueError("cannot index an empty catalog; give at least one product")
        self.config = config or SearchConfig()
        self.products = list(products)
        self._stem = _stem_function(self.config.stemmer)
        corpus_tokens = bm25s.tokenize(
            [p.search_text() for p in self.products], stopwords="en", stemmer=self._stem,
            return_ids=True, show_progress=False,
        )
        self._retriever = bm25s.BM25(method="lucene", k1=self.config.k1, b=self.config.b)
        self._retriever.index(corpus_tokens, show_progress=False)
        self._positions = np.arange(len(self.products))

    # PyStemmer's stemmer is a C object that cannot be pickled: a copy of the engine (pickle,
    # copy.deepcopy, a vector env's worker) keeps the index and makes its stemmer again from the
    # config, so it tokenises and scores exactly as the original.
    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        del state["_stem"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._stem = _stem_function(self.config.stemmer)

    def tokenize(self, query: str) -> list[str]:
        """Query tokens as the index sees them (lower case, stop words removed, stemmed)."""
        query = query[: self.config.max_query_chars]
        tokens = bm25s.tokenize([query], stopwords="en", stemmer=self._stem, return_ids=False, show_progress=False)
        return list(tokens[0]) if tokens else []

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of every product for ``query`` (``[num_products]``, zeros for no match)."""
        ids = self._retriever.get_tokens_ids(self.tokenize(query))
        if not ids:
            return np.zeros(len(self.products), dtype=np.float32)
        return self._retriever.get_scores(ids)

    def search(self, query: str, k: int | None = None) -> list[Product]:
        """The top ``k`` (default ``config.top_k``) matching products, best first."""
        k = self.config.top_k if k is None else k
        scores = self.scores(query)  # [num_products]
        # lexsort: last key is primary; ties broken by catalog position -> reproducible order.
        order = np.lexsort((self._positions, -scores))
        hits = [int(i) for i in order[:k] if scores[i] > 0]
        return [self.products[i] for i in hits]
