"""WebShop (Yao et al. 2022, arXiv 2207.01206) as a text environment engine.

Modules: :mod:`schema` (products, goals, catalogs), :mod:`catalog_embedded` (seeded generator,
no download), :mod:`catalog_official` (the official JSON files, unchanged), :mod:`search` (BM25
with ``bm25s``), :mod:`pages` (page state, text, clickables), :mod:`reward` (the original
formula), :mod:`session` (a single-agent session without PettingZoo), :mod:`policies` (oracle
and random yardsticks). The PettingZoo env is :mod:`marft_envs.envs.webshop`.
"""

from marft_envs.webshop.catalog_embedded import EmbeddedConfig, build_embedded_catalog
from marft_envs.webshop.catalog_official import OfficialConfig, load_official_catalog
from marft_envs.webshop.reward import RewardBreakdown, compute_reward
from marft_envs.webshop.schema import Catalog, Goal, Product, Review
from marft_envs.webshop.search import SearchConfig, SearchEngine
from marft_envs.webshop.session import SessionConfig, StepResult, WebShopSession, parse_action

__all__ = [
    "EmbeddedConfig", "build_embedded_catalog", "OfficialConfig", "load_official_catalog",
    "RewardBreakdown", "compute_reward", "Catalog", "Goal", "Product", "Review", "SearchConfig",
    "SearchEngine", "SessionConfig", "StepResult", "WebShopSession", "parse_action",
]
