"""The config sections of the model side, as plain dataclasses: no torch, transformers or peft.

One module per YAML section, each holding the section's dataclass (one docstring per field) and
the names its fields accept, declared once:

* :mod:`marft_agents.settings.model`: ``model:`` (:class:`~marft_agents.settings.model.ModelConfig`,
  dtype names, model aliases);
* :mod:`marft_agents.settings.lora`: ``lora:`` and ``critic.lora:`` (``LoraSpec``);
* :mod:`marft_agents.settings.critic`: ``critic:`` (``CriticConfig``, critic modes);
* :mod:`marft_agents.settings.sampling`: ``sampling:`` (``SamplingConfig``, decoding engines);
* :mod:`marft_agents.settings.vllm`: ``vllm:`` (``VLLMConfig``, the vLLM sampling engine's options);
* :mod:`marft_agents.settings.grpo`: the ``learner:`` section of ``algorithm: grpo``
  (``GRPOOptions``, groupings, normalisations, aggregations).
* :mod:`marft_agents.settings.credit`: the names ``ppo.credit`` accepts (``CREDIT_STRATEGIES``; the
  ``ppo:`` section itself is assembled in :mod:`marft_agents.config`).

:mod:`marft_agents.config` assembles them with the run-level sections (``env``, ``ppo``,
``schedule``, ``eval``) into ``TrainConfig`` and loads it from YAML; importing either loads no
deep-learning library (``tests/agents/test_config_plain.py``).
"""
