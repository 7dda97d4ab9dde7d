"""The config sections of the model side, as plain dataclasses: no torch, transformers or peft.

One module per YAML section, each holding the section's dataclass (one docstring per field) and
the names its fields accept, declared once:

* :mod:`marft_agents.settings.env`: ``env:`` (``EnvConfig``);
* :mod:`marft_agents.settings.ppo`: ``ppo:`` (``PPOConfig``) and
  :mod:`marft_agents.settings.credit`: the names ``ppo.credit`` accepts (``CREDIT_STRATEGIES``);
* :mod:`marft_agents.settings.schedule`: ``schedule:`` (``ScheduleConfig``, the budgets);
* :mod:`marft_agents.settings.eval`: ``eval:`` (``EvalConfig``);
* :mod:`marft_agents.settings.advantage`: ``advantage:`` (``AdvantageConfig``), its baselines read
  from :mod:`marft_agents.settings.estimators` (every estimator, registered by name);
* :mod:`marft_agents.settings.model`: ``model:`` (:class:`~marft_agents.settings.model.ModelConfig`,
  dtype names, model aliases);
* :mod:`marft_agents.settings.lora`: ``lora:`` and ``critic.lora:`` (``LoraSpec``);
* :mod:`marft_agents.settings.critic`: ``critic:`` (``CriticConfig``, critic modes);
* :mod:`marft_agents.settings.sampling`: ``sampling:`` (``SamplingConfig``, decoding engines);
* :mod:`marft_agents.settings.vllm`: ``vllm:`` (``VLLMConfig``, the vLLM sampling engine's options);
* :mod:`marft_agents.settings.grpo`: the ``learner:`` section of ``algorithm: grpo``
  (``GRPOOptions``, groupings, normalisations, aggregations).

:mod:`marft_agents.config` assembles them into ``TrainConfig`` (and re-exports the run-level
sections' classes), resolves the run plan and loads it from YAML; importing either loads no
deep-learning library (``tests/agents/test_config_plain.py``).
"""
