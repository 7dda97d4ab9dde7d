"""``marft/WebShop-v0``: the WebShop web-shopping task (Yao et al. 2022) for LLM agent teams.

One round is one web step: the graded agent's utterance (the shopper's) is parsed as
``search[<query>]`` or ``click[<element>]`` and executed on a :class:`WebShopSession`. Needs no
data files: the default catalog is the embedded seeded generator (1,000 products, 2,000 goals);
``catalog="official"`` with ``data_dir`` reads the original WebShop files unchanged.

Agents
    The profile's roles (default ``shopper``: ``shopper_0`` alone). ``planner_shopper``: the
    planner writes a search plan in round 0 only, the shopper acts every round.
    ``shopper_verifier``: the verifier acts only when the shopper proposes ``click[buy now]`` on
    an item page and must reply APPROVE for the purchase to happen. D_t (see
    :mod:`marft_envs.webshop.team`) is in ``infos[agent]["dependency"]`` every step.

Observations
    ``{"text": str}``. Shopper (and any other acting role): the current page in the original's
    text mode (visible strings joined by ``" [SEP] "``, instruction first), then the plan (when a
    planner wrote one), the last ``history_actions`` actions, a note when the last action was
    invalid, and the valid actions (``show_valid_actions``). Planner: the instruction. Verifier:
    the item page, the chosen options and the shopper's proposal.

Actions
    ``str``. The last ``search[...]``/``click[...]`` in the graded utterance is executed
    (``strict_parse=True``: the whole utterance must be one). Invalid actions (unknown elements,
    malformed brackets, search without a search bar, buying outside an item page) leave the page
    unchanged and do not end the episode. With ``action_mask=True``, ``infos`` also carry
    ``valid_action_mask`` (int8, ``[max_valid_actions]``, aligned with ``valid_actions``; 1 for
    concrete clicks) and an utterance that is just an integer ``k`` executes ``valid_actions[k]``.

Rewards
    On purchase, every agent gets the WebShop reward r = r_type * (matched attributes + matched
    options + price ok) / (goal attributes + goal options + 1) in [0, 1] and the episode
    terminates (``solved`` = bought; ``infos["success"]`` = reward 1). Other rounds give 0. After
    ``max_steps`` rounds (default 15) without a purchase the episode is truncated. Components
    (``r_type``, ``r_att``, ``r_option``, ``r_price``, weights, matches) are in
    ``infos[agent]["reward_info"]``; the step's details in ``infos[agent]["webshop"]``.

Keyword arguments
    ``catalog`` ("embedded" | "official" | a :class:`Catalog`), ``split`` ("test" | "val" |
    "train" | "all"; default "test"), ``catalog_seed`` / ``num_products`` / ``goals_per_product``
    (embedded), ``data_dir`` / ``setting`` ("small" | "full") / ``human_goals`` (official),
    ``max_steps``, ``show_attrs``, ``search_anywhere``, ``strict_parse``, ``history_actions``,
    ``show_valid_actions``, ``action_mask``, ``max_valid_actions``, ``approve_when_unclear``,
    plus every :class:`TextTaskEnv` keyword (``profile``, ``dependency``, ``render_mode`` ...;
    ``horizon`` is ``max_steps``).

Version history
    v0: first release.
"""

from __future__ import annotations

from typing import Any

from marft_envs.core.task import RoundOutcome, Task
from marft_envs.core.text_env import TextTaskEnv
from marft_envs.webshop.catalog_embedded import EmbeddedConfig, build_embedded_catalog
from marft_envs.webshop.catalog_official import OfficialConfig, load_official_catalog
from marft_envs.webshop.pages import PageKind
from marft_envs.webshop.schema import Catalog, Goal
from marft_envs.webshop.session import SessionConfig, WebShopSession, parse_action
from marft_envs.webshop.team import PLANNER_ROLE, VERIFIER_ROLE, WebShopDependency, parse_verdict


def _quote(text: str, limit: int = 2_000) -> str:
    """Cut a quoted teammate output so a runaway utterance cannot crowd out the page."""
    return text if len(text) <= limit else text[:limit] + " [...]"


class GoalTasks:
    """A catalog split as a task source: task ``i`` is goal ``i`` of the split."""

    def __init__(self, catalog: Catalog, split: str):
        self.catalog, self.split = catalog, split
        self.goals: list[Goal] = catalog.split(split)

    def __len__(self) -> int:
        return len(self.goals)

    def __getitem__(self, index: int) -> Task:
        goal = self.goals[index]
        return Task(
            task_id=f"webshop/{self.catalog.name}/{self.split}/{index}", prompt=goal.instruction_text,
            answer=goal, metadata={"asin": goal.asin, "split": self.split, "index": index},
        )


def resolve_catalog(catalog: str | Catalog, **kwargs: Any) -> Catalog:
    """``"embedded"`` (seed / size kwargs), ``"official"`` (``data_dir`` ...) or a Catalog."""
    if isinstance(catalog, Catalog):
        return catalog
    if catalog == "embedded":
        return build_embedded_catalog(EmbeddedConfig(
            seed=kwargs.get("catalog_seed", 0), num_products=kwargs.get("num_products", 1000),
            goals_per_product=kwargs.get("goals_per_product", 2)))
    if catalog == "official":
        if not kwargs.get("data_dir"):
            raise ValueError("catalog='official' needs data_dir=<folder with the WebShop JSON files>")
        return load_official_catalog(OfficialConfig(
            data_dir=str(kwargs["data_dir"]), setting=kwargs.get("setting", "small"),
            human_goals=kwargs.get("human_goals", True), num_products=kwargs.get("num_products")))
    raise ValueError(f"catalog must be 'embedded', 'official' or a Catalog, got {catalog!r}")


class WebShopEnv(TextTaskEnv):
    """WebShop as a multi-agent text env; see the module docstring."""

    metadata = {"name": "marft_webshop_v0", "render_modes": ["ansi", "human"], "is_parallelizable": True}
    default_profile = "shopper"

    def __init__(
        self,
        catalog: str | Catalog = "embedded",
        split: str = "test",
        max_steps: int = 15,
        catalog_seed: int = 0,
        num_products: int | None = None,
        goals_per_product: int = 2,
        data_dir: str | None = None,
        setting: str = "small",
        human_goals: bool = True,
        show_attrs: bool = False,
        search_anywhere: bool = False,
        strict_parse: bool = False,
        history_actions: int = 5,
        show_valid_actions: bool = True,
        action_mask: bool = False,
        max_valid_actions: int = 64,
        approve_when_unclear: bool = False,
        dependency: Any = None,
        **kwargs: Any,
    ):
        if "horizon" in kwargs:
            raise ValueError("WebShop's horizon is max_steps (one round = one web step); pass max_steps")
        self.catalog = resolve_catalog(
            catalog, catalog_seed=catalog_seed, goals_per_product=goals_per_product, data_dir=data_dir,
            setting=setting, human_goals=human_goals,
            num_products=(1000 if catalog == "embedded" and num_products is None else num_products))
        self.session = WebShopSession(self.catalog, SessionConfig(
            max_steps=max_steps, show_attrs=show_attrs, search_anywhere=search_anywhere, strict_parse=strict_parse))
        self.history_actions = history_actions
        self.show_valid_actions = show_valid_actions
        self.action_mask = action_mask
        self.max_valid_actions = max_valid_actions
        self.approve_when_unclear = approve_when_unclear
        super().__init__(GoalTasks(self.catalog, split), horizon=max_steps, dependency=dependency, **kwargs)
        # Why wrap: D_t must depend on the round (planner once) and on the shopper's output
        # (verifier on purchase), which the core's static/callable dependencies cannot express.
        # Bound methods, not lambdas: the env must pickle (vector envs, multiprocessing).
        self.dependency = WebShopDependency(
            self.dependency, role_of=self._role_name, is_graded=self._is_graded, wants_purchase=self._wants_purchase)
        self.dependency.validate(self.possible_agents)

    # -- helpers ---------------------------------------------------------------------------------
    def _resolve_index_action(self, text: str) -> str:
        """With ``action_mask``, an utterance that is just ``k`` means ``valid_actions[k]``."""
        stripped = text.strip()
        if self.action_mask and stripped.isdigit():
            k, actions = int(stripped), self.session.valid_actions()
            mask = self.session.action_mask(self.max_valid_actions)
            if k < len(mask) and mask[k]:
                return actions[k]
        return text

    def _role_name(self, agent: str) -> str:
        return self.profile.role_of(agent).name

    def _is_graded(self, agent: str) -> bool:
        return self.profile.role_of(agent).graded

    def _wants_purchase(self, text: str) -> bool:
        """Would executing ``text`` now buy something? (triggers the verifier)"""
        name, arg, _ = parse_action(self._resolve_index_action(text), self.session.config.strict_parse)
        return (name == "click" and (arg or "").lower() == "buy now"
                and self.session.state.kind is PageKind.ITEM and not self.session.done)

    def _agents_with_role(self, role: str) -> list[str]:
        return [a for a in self.possible_agents if self.profile.role_of(a).name == role]

    # -- TextTaskEnv hooks -----------------------------------------------------------------------
    def start_episode(self, task: Task) -> None:
        self.session.reset(task.answer)
        self._actions: list[tuple[str, str]] = []  # (action, error)
        self._last_step: dict[str, Any] = {}

    def grade_round(self, task: Task, outputs: dict[str, str], round_index: int) -> RoundOutcome:
        action = self._resolve_index_action(self.graded_output(outputs))
        verdicts = {v: parse_verdict(outputs[v]) for v in self._agents_with_role(VERIFIER_ROLE) if v in outputs}
        if verdicts:
            approved = all((self.approve_when_unclear if v is None else v) for v in verdicts.values())
            if not approved:
                note = "The verifier rejected the purchase; nothing was bought."
                self._actions.append((action, note))
                self._last_step = {"valid": False, "error": note, "verifier_approved": False, "executed": None}
                return RoundOutcome(0.0, False, feedback=f"{note} {self.session.observation}",
                                    info=dict(self._last_step))
        result = self.session.step(action)
        executed = parse_action(action, self.session.config.strict_parse)
        shown = f"{executed[0]}[{executed[1]}]" if executed[0] else action[:200]
        self._actions.append((shown, result.info["error"]))
        self._last_step = {"valid": result.info["valid"], "error": result.info["error"], "executed": shown,
                           "page": result.info["page"], "steps": self.session.steps}
        if verdicts:
            self._last_step["verifier_approved"] = True
        reward = float(result.reward) if result.done else 0.0
        info = {**self._last_step, "bought": result.done, "reward": reward,
                "success": bool(result.done and reward >= 1.0 - 1e-9)}
        if "reward_info" in result.info:
            info["reward_info"] = result.info["reward_info"]
        return RoundOutcome(team_reward=reward, solved=result.done, feedback=result.observation, info=info)

    def compose_observation(self, agent: str) -> str:
        role = self.profile.role_of(agent).name
        instruction = self.session.goal.instruction_text
        if role == PLANNER_ROLE:
            return f"Instruction: {instruction}"
        sections = [self.session.observation]
        if role == VERIFIER_ROLE:
            options = self.session.state.options
            chosen = ", ".join(f"{k}: {v}" for k, v in options.items()) or "none"
            sections.append(f"Selected options: {chosen}")
        plans = [(a, text) for record in self.history[:1] for a, text in record.outputs.items()
                 if self.profile.role_of(a).name == PLANNER_ROLE]
        parents = [(p, self.round_outputs[p]) for p in self.graph.parents(agent) if p in self.round_outputs]
        if role != VERIFIER_ROLE:
            sections += [f"Plan ({a}):\n{_quote(t)}" for a, t in plans if (a, t) not in parents]
            recent = self._actions[-self.history_actions:] if self.history_actions > 0 else []
            if recent:
                first = len(self._actions) - len(recent) + 1
                lines = [f"{first + i}. {a}" + (f"  (invalid: {e})" if e else "") for i, (a, e) in enumerate(recent)]
                sections.append("Previous actions:\n" + "\n".join(lines))
        sections += [f"{p} ({self.profile.role_of(p).name}) wrote:\n{_quote(t)}" for p, t in parents]
        if role == VERIFIER_ROLE:
            sections.append("Reply APPROVE to buy this product with these options, or REJECT and say what is wrong.")
        elif self.show_valid_actions and not self.session.done:
            sections.append("Valid actions: " + ", ".join(self.session.valid_actions()))
        return "\n\n".join(sections)

    def extra_info(self, agent: str) -> dict[str, Any]:
        info = self.session.info()
        out: dict[str, Any] = {
            "valid_actions": info["valid_actions"], "has_search_bar": info["has_search_bar"],
            "page": info["page"], "webshop": dict(self._last_step),
        }
        if "reward_info" in info:
            out["reward_info"] = info["reward_info"]
            out["success"] = info["reward_info"]["reward"] >= 1.0 - 1e-9
        if self.action_mask:
            # Not "action_mask": PettingZoo's api_test would pass that key to Text.sample.
            out["valid_action_mask"] = self.session.action_mask(self.max_valid_actions)
        return out
