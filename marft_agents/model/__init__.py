"""The policy and its model: loading the base model (``loading``), LoRA adapters per agent, the
multi-agent policy, its training-time forward passes (``scoring``), the critic's value head, and
tiny random models for tests."""
