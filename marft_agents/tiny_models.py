"""A tiny randomly initialised Llama and a byte-level tokenizer with a chat template, built in
memory (no files, no download), for fast tests and ``--tiny`` benchmarks."""

from __future__ import annotations

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from marft_agents.models import prepare_tokenizer, resolve_dtype


_TINY_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# A ChatML-style template stored *in the tokenizer*, like real chat models ship; code never
# formats chat turns by hand, it calls tokenizer.apply_chat_template.
_TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer (256 byte tokens + 3 specials) with a chat template; no files."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    byte_chars = pre_tokenizers.ByteLevel.alphabet()  # the 256 printable stand-ins for bytes
    vocab = {tok: i for i, tok in enumerate(_TINY_SPECIALS)}
    for ch in sorted(byte_chars):
        vocab[ch] = len(vocab)
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token="<|im_start|>", eos_token="<|im_end|>", pad_token="<|im_end|>",
        unk_token="<|endoftext|>", additional_special_tokens=list(_TINY_SPECIALS),
    )
    tokenizer.chat_template = _TINY_CHAT_TEMPLATE
    return prepare_tokenizer(tokenizer)


def tiny_model_and_tokenizer(
    seed: int = 0,
    hidden_size: int = 64,
    num_layers: int = 2,
    dtype: str = "float32",
) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    """A randomly initialised small Llama and the tiny tokenizer, for fast tests.

    The global torch RNG is left untouched (the init uses a forked RNG seeded with ``seed``).
    """
    tokenizer = tiny_tokenizer()
    config = LlamaConfig(
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
        model = LlamaForCausalLM(config)
    model.to(resolve_dtype(dtype))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.eval()
    return model, tokenizer
