"""Tiny randomly initialised causal LMs (Llama, Qwen2) and a byte-level tokenizer with a chat
template, built in memory (no files, no download), for fast tests and ``--tiny`` benchmarks.

Two architectures (``TINY_ARCHITECTURES``): ``llama``, the default every test was written
against (its seeded weights are part of those tests' numbers), and ``qwen2``, the layout of the
Qwen2.5 models a GPU run trains (Qwen2.5-1.5B-Instruct): bias on the q/k/v projections, no
sliding window, tied input and output embeddings (as the 0.5B, 1.5B and 3B models ship; 7B and
larger untie them), RoPE base 1e6 and RMSNorm eps 1e-6. Code that works for one family only
(``engine/direct.py``'s Llama decode steps) is tested against the other with it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from transformers import (LlamaConfig, LlamaForCausalLM, PretrainedConfig, PreTrainedModel,
                          PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM)

from marft_agents.model.loading import prepare_tokenizer, resolve_dtype


_TINY_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# A ChatML-style template stored *in the tokenizer*, like real chat models ship; code never
# formats chat turns by hand, it calls tokenizer.apply_chat_template.
_TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


# A Llama-3-style second tokenizer: other special tokens, another template, the bytes in another
# order and a few merges, so the same text gets other ids and lengths than under the ChatML one
# (a team of two models must never mix their token ids up).
_LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                    "<|end_of_text|>"]
_LLAMA3_CHAT_TEMPLATE = (
    "{{ '<|begin_of_text|>' }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
TINY_TOKENIZERS: tuple[str, ...] = ("chatml", "llama3")
"""The ``tokenizer`` values of :func:`tiny_tokenizer` / :func:`tiny_model_and_tokenizer`."""


def tiny_tokenizer(style: str = "chatml") -> PreTrainedTokenizerFast:
    """A byte-level tokenizer with a chat template; no files. ``chatml`` (the default every test
    was written against): 256 byte tokens + 3 specials, ChatML turns. ``llama3``: 5 other
    specials, Llama-3 headers, the bytes in reverse order and merges of common letter pairs."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    if style not in TINY_TOKENIZERS:
        raise ValueError(f"unknown tiny tokenizer {style!r}; expected one of {list(TINY_TOKENIZERS)}")
    byte_chars = pre_tokenizers.ByteLevel.alphabet()  # the 256 printable stand-ins for bytes
    specials = _TINY_SPECIALS if style == "chatml" else _LLAMA3_SPECIALS
    vocab = {tok: i for i, tok in enumerate(specials)}
    for ch in sorted(byte_chars, reverse=style == "llama3"):
        vocab[ch] = len(vocab)
    merges: list[tuple[str, str]] = []
    if style == "llama3":
        for pair in ("th", "he", "in", "er", "an", "re", "on", "at"):
            merges.append((pair[0], pair[1]))
            vocab[pair] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    if style == "chatml":
        tokenizer = PreTrainedTokenizerFast(
            tokenizer_object=backend,
            bos_token="<|im_start|>", eos_token="<|im_end|>", pad_token="<|im_end|>",
            unk_token="<|endoftext|>", additional_special_tokens=list(_TINY_SPECIALS),
        )
        tokenizer.chat_template = _TINY_CHAT_TEMPLATE
    else:
        tokenizer = PreTrainedTokenizerFast(
            tokenizer_object=backend, bos_token="<|begin_of_text|>", eos_token="<|eot_id|>",
            pad_token="<|end_of_text|>", unk_token="<|end_of_text|>", additional_special_tokens=list(_LLAMA3_SPECIALS),
        )
        tokenizer.chat_template = _LLAMA3_CHAT_TEMPLATE
    return prepare_tokenizer(tokenizer)


def _llama(**common: Any) -> tuple[PretrainedConfig, type[PreTrainedModel]]:
    return LlamaConfig(**common), LlamaForCausalLM


def _qwen2(**common: Any) -> tuple[PretrainedConfig, type[PreTrainedModel]]:
    # Qwen2 always has q/k/v biases (o_proj none); the rest as Qwen2.5-1.5B-Instruct's config.json
    config = Qwen2Config(**common, rms_norm_eps=1e-6, use_sliding_window=False,
                         rope_parameters={"rope_type": "default", "rope_theta": 1e6})
    return config, Qwen2ForCausalLM


_ARCHITECTURES: dict[str, Callable[..., tuple[PretrainedConfig, type[PreTrainedModel]]]] = {
    "llama": _llama,
    "qwen2": _qwen2,
}
TINY_ARCHITECTURES: tuple[str, ...] = tuple(_ARCHITECTURES)
"""The ``arch`` values of :func:`tiny_model_and_tokenizer` (each the models' ``config.model_type``)."""
DEFAULT_TINY_ARCHITECTURE = "llama"
"""The architecture of every tiny model unless one is asked for."""


def tiny_model_and_tokenizer(
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    dtype: str = "float32",
    arch: str = DEFAULT_TINY_ARCHITECTURE,
    tokenizer: str = "chatml",
) -> tuple[PreTrainedModel, PreTrainedTokenizerFast]:
    """A randomly initialised small model of architecture ``arch`` (one of
    ``TINY_ARCHITECTURES``) and the tiny tokenizer ``tokenizer`` (one of ``TINY_TOKENIZERS``), for fast tests.

    Same shape in every architecture (4 query heads, 2 key/value heads, MLP width twice the
    hidden size, tied embeddings); linear biases (Qwen2's q/k/v) are drawn like the weights, not
    left at zero. The global torch RNG is left untouched (the init uses a forked
    RNG seeded with ``seed``), so a given ``(seed, sizes, arch)`` always gives the same weights.
    """
    if arch not in _ARCHITECTURES:
        raise ValueError(f"unknown tiny architecture {arch!r}; expected one of {list(TINY_ARCHITECTURES)}")
    tokenizer = tiny_tokenizer(tokenizer)
    config, model_class = _ARCHITECTURES[arch](
        vocab_size=len(tokenizer), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=1024, tie_word_embeddings=True,
        # A wider init than the usual 0.02 gives peaked, non-uniform next-token distributions,
        # so tests can tell adapters and models apart.
        initializer_range=0.2,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class(config)
        # transformers zeroes linear biases; random ones (Qwen2's q/k/v) make a code path that
        # drops a bias change the numbers. Llama has none, so its weights stay as they were.
        with torch.no_grad():
            for module in model.modules():
                if isinstance(module, torch.nn.Linear) and module.bias is not None:
                    module.bias.normal_(0.0, config.initializer_range)
    model.to(resolve_dtype(dtype))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.eval()
    return model, tokenizer
