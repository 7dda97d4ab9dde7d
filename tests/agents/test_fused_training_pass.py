"""The training pass's fast paths compute what the plain paths compute: the fused, chunked LM
head + log-prob + entropy (``head_logprobs``) and the grouped-matmul attention (``attention``),
values and gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import marft_agents.engine.head_logprobs as hl
from marft_agents.engine.attention import (
    GROUPED_MATMUL,
    grouped_matmul_attention,
    mask_bias,
    training_passes,
    use_grouped_matmul_attention,
)
from marft_agents.model.policy import MultiAgentPolicy
from marft_agents.model.scoring import Scorer, ScoringPaths
from marft_agents.ppo_math import entropy_from_logprobs
from marft_agents.model.tiny_models import tiny_model_and_tokenizer


def reference(hidden, weight, tokens, temperature):
    """The plain definition: full logits, log_softmax, gather, entropy."""
    logp_all = torch.log_softmax(F.linear(hidden, weight).float() / temperature, dim=-1)  # [N, V]
    return logp_all.gather(-1, tokens[:, None]).squeeze(-1), entropy_from_logprobs(logp_all)


def head_case(rows=37, hidden_size=16, vocab=300, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(rows, hidden_size, generator=g) * 2
    head = nn.Linear(hidden_size, vocab, bias=False)
    with torch.no_grad():
        head.weight.copy_(torch.randn(vocab, hidden_size, generator=g))
    head.weight.requires_grad_(False)
    tokens = torch.randint(0, vocab, (rows,), generator=g)
    return hidden, head, tokens


@pytest.mark.parametrize("chunk_rows", [1, 5, 1000])
@pytest.mark.parametrize("temperature", [1.0, 0.5])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_head_matches_the_plain_definition_values_and_gradients(monkeypatch, chunk_rows,
                                                                      temperature, dtype):
    # bf16 takes the reused float32 buffers (the logits are copied into them); float32 does not
    hidden, head, tokens = head_case()
    hidden, head = hidden.to(dtype), head.to(dtype)
    monkeypatch.setattr(hl, "CHUNK_BYTES", chunk_rows * 4 * head.weight.shape[0])
    g = torch.Generator().manual_seed(1)
    w_logp, w_ent = torch.randn(len(tokens), generator=g), torch.randn(len(tokens), generator=g)

    fused_in = hidden.clone().requires_grad_(True)
    logp, entropy = hl.head_logprobs(fused_in, head, tokens, temperature, with_entropy=True)
    ((logp * w_logp).sum() + (entropy * w_ent).sum()).backward()

    plain_in = hidden.clone().requires_grad_(True)
    ref_logp, ref_entropy = reference(plain_in, head.weight, tokens, temperature)
    ((ref_logp * w_logp).sum() + (ref_entropy * w_ent).sum()).backward()

    torch.testing.assert_close(logp, ref_logp, atol=1e-5, rtol=1e-6)  # log-probs reach ~-100 here
    torch.testing.assert_close(entropy, ref_entropy, atol=1e-5, rtol=1e-6)
    # the backward is hand-written: a sign or a term wrong here fails by O(1); in bf16 both sides
    # round the logits' gradient to bf16 before the product with the head's weight
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(fused_in.grad, plain_in.grad, atol=tol, rtol=tol)


def test_fused_head_without_entropy_has_the_log_prob_gradient_alone():
    hidden, head, tokens = head_case(rows=9)
    fused_in = hidden.clone().requires_grad_(True)
    logp, entropy = hl.head_logprobs(fused_in, head, tokens, 0.7, with_entropy=False)
    assert entropy is None
    logp.sum().backward()
    plain_in = hidden.clone().requires_grad_(True)
    reference(plain_in, head.weight, tokens, 0.7)[0].sum().backward()
    torch.testing.assert_close(fused_in.grad, plain_in.grad, atol=1e-4, rtol=1e-4)


def test_fused_head_buffers_first_made_under_inference_mode_serve_a_gradient_pass(monkeypatch):
    monkeypatch.setattr(hl, "_scratch", {})  # the buffers are made by the inference-mode call
    hidden, head, tokens = head_case(rows=6)
    hidden, head = hidden.to(torch.bfloat16), head.to(torch.bfloat16)
    with torch.inference_mode():
        scored, _ = hl.head_logprobs(hidden, head, tokens, 0.5, with_entropy=True)
    fused_in = hidden.clone().requires_grad_(True)
    logp, _ = hl.head_logprobs(fused_in, head, tokens, 0.5, with_entropy=True)
    logp.sum().backward()
    assert torch.equal(logp.detach(), scored) and torch.isfinite(fused_in.grad).all()


def test_fused_head_rejects_a_non_positive_temperature():
    hidden, head, tokens = head_case(rows=2)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        hl.head_logprobs(hidden, head, tokens, 0.0, with_entropy=False)


def test_only_plain_heads_of_known_model_types_take_the_fused_path():
    model, _ = tiny_model_and_tokenizer()
    model.requires_grad_(False)
    assert hl.plain_head(model) is model.get_output_embeddings()
    model.config.model_type = "gemma2"  # soft-caps its logits in the forward
    assert hl.plain_head(model) is None
    model.config.model_type = "llama"
    model.get_output_embeddings().weight.requires_grad_(True)  # a trained head needs its gradient
    assert hl.plain_head(model) is None


def test_policy_scores_the_same_with_and_without_the_fused_head():
    model, tok = tiny_model_and_tokenizer(seed=3)
    policy = MultiAgentPolicy(model, tok, ["a"])
    policy.set_trainable({"a"}, critic=False)
    with torch.no_grad():
        for param in policy.trainable_parameters():
            param.add_(torch.randn_like(param) * 0.3)
    g = torch.Generator().manual_seed(0)
    vocab = policy.lm.config.vocab_size
    prompts = [torch.randint(3, vocab, (12 - i % 4,), generator=g).tolist() for i in range(6)]
    responses = [torch.randint(3, vocab, (1 + i % 4,), generator=g).tolist() for i in range(6)]

    def run(scorer):
        policy.zero_grad(set_to_none=True)
        stats = scorer.token_logprobs("policy_a", prompts, responses, 0.7)
        (stats.logprobs.sum() + stats.entropy.sum()).backward()
        return stats, [p.grad.clone() for p in policy.trainable_parameters() if p.grad is not None]

    assert hl.plain_head(policy.lm) is not None and policy.scoring.paths.fused_head
    fused, fused_grads = run(policy.scoring)
    plain, plain_grads = run(Scorer(policy, ScoringPaths(fused_head=False)))
    assert torch.equal(fused.mask, plain.mask)
    assert (fused.logprobs[~fused.mask] == 0).all() and (fused.entropy[~fused.mask] == 0).all()
    torch.testing.assert_close(fused.logprobs, plain.logprobs, atol=2e-5, rtol=0)
    torch.testing.assert_close(fused.entropy, plain.entropy, atol=2e-5, rtol=0)
    assert len(fused_grads) == len(plain_grads) > 0
    for a, b in zip(fused_grads, plain_grads):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-3)


# -- attention ---------------------------------------------------------------------------------

class _Heads(nn.Module):
    num_key_value_groups = 3


def attention_case(batch=3, heads=6, kv_heads=2, q_len=5, k_len=8, dim=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, q_len, dim, generator=g)
    k = torch.randn(batch, kv_heads, k_len, dim, generator=g)
    v = torch.randn(batch, kv_heads, k_len, dim, generator=g)
    # causal with the queries as the last q_len keys, and left padding of 0 / 2 / 3 keys
    allowed = torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len)
    allowed = allowed[None, None].repeat(batch, 1, 1, 1)  # [B, 1, Lq, Lk]
    for row, pads in enumerate((0, 2, 3)):
        allowed[row, :, :, :pads] = False
    return q, k, v, allowed


def sdpa_reference(q, k, v, allowed):
    groups = q.shape[1] // k.shape[1]
    out = F.scaled_dot_product_attention(q, k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1),
                                         attn_mask=allowed)  # [B, H, Lq, D]
    return out.transpose(1, 2)


@pytest.mark.parametrize("masked", [True, False])
def test_grouped_attention_matches_sdpa_values_and_gradients(masked):
    q, k, v, allowed = attention_case()
    mask = allowed if masked else None
    inputs = [t.clone().requires_grad_(True) for t in (q, k, v)]
    with training_passes():
        out, weights = grouped_matmul_attention(_Heads(), *inputs, mask, scaling=q.shape[-1] ** -0.5)
    assert weights is None and out.shape == (3, 5, 6, 4)
    ref_inputs = [t.clone().requires_grad_(True) for t in (q, k, v)]
    ref_mask = mask if masked else torch.ones(5, 8, dtype=torch.bool).tril(3)
    ref = sdpa_reference(*ref_inputs, ref_mask)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    g = torch.randn_like(out)
    (out * g).sum().backward()
    (ref * g).sum().backward()
    for a, b in zip(inputs, ref_inputs):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-5, rtol=1e-5)


def test_grouped_attention_keeps_fully_masked_padding_queries_finite():
    q, k, v, allowed = attention_case(q_len=8)
    allowed[2, :, :3] = False  # padding queries that may attend to nothing
    inputs = [t.clone().requires_grad_(True) for t in (q, k, v)]
    with training_passes():
        out, _ = grouped_matmul_attention(_Heads(), *inputs, allowed)
    assert torch.isfinite(out).all()
    out[:, 3:].sum().backward()  # the loss reads real positions only
    assert all(torch.isfinite(t.grad).all() for t in inputs)


def test_mask_bias_gives_the_masked_fill_softmax_bit_for_bit():
    torch.manual_seed(3)
    scores = torch.randn(2, 3, 2, 5, 7) * 30  # [B, KV, G, Lq, Lk] float32
    allowed = torch.rand(2, 1, 1, 5, 7) > 0.4
    allowed[1, :, :, 0] = False  # a padding query that may attend to nothing
    filled = scores.masked_fill(~allowed, torch.finfo(torch.float32).min)
    assert torch.equal(torch.softmax(scores + mask_bias(allowed), -1), torch.softmax(filled, -1))


def test_one_token_queries_and_passes_outside_training_go_to_sdpa_unchanged():
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    q, k, v, allowed = attention_case(q_len=1)
    with training_passes():
        out, _ = grouped_matmul_attention(_Heads(), q, k, v, allowed[:, :, -1:])
    assert torch.equal(out, sdpa_attention_forward(_Heads(), q, k, v, allowed[:, :, -1:])[0])
    q, k, v, allowed = attention_case()
    out, _ = grouped_matmul_attention(_Heads(), q, k, v, allowed)  # sampling, collection, eval
    assert torch.equal(out, sdpa_attention_forward(_Heads(), q, k, v, allowed)[0])


def test_only_half_precision_cpu_models_switch_to_grouped_attention():
    model, _ = tiny_model_and_tokenizer()
    assert model.config._attn_implementation == "sdpa"
    assert not use_grouped_matmul_attention(model)  # float32: the fused kernel is as fast
    model.to(torch.bfloat16)
    assert use_grouped_matmul_attention(model)
    assert model.config._attn_implementation == GROUPED_MATMUL
    assert not use_grouped_matmul_attention(model)  # already switched


def test_the_scoring_paths_are_a_scorer_option_and_the_policy_keeps_the_fast_ones(monkeypatch):
    import marft_agents.model.scoring as scoring

    model, tok = tiny_model_and_tokenizer(seed=3)
    policy = MultiAgentPolicy(model, tok, ["a"])
    calls = []
    fused = scoring.head_logprobs
    monkeypatch.setattr(scoring, "head_logprobs", lambda *a, **k: calls.append(1) or fused(*a, **k))
    prompts, responses = [[5, 6, 7, 8], [9, 10, 11]], [[12, 13], [14]]
    with torch.no_grad():
        policy.token_logprobs("policy_a", prompts, responses, 0.7)
        assert calls, "the policy's own scorer did not take the fused head"
        calls.clear()
        Scorer(policy, ScoringPaths(fused_head=False)).token_logprobs("policy_a", prompts, responses, 0.7)
    assert not calls, "a scorer built with fused_head=False took the fused head"
    chain = [[1, 2], [1, 2, 3], [4]]  # the first extends into the second: one merged row
    assert len(policy.value_rows(chain)[0]) == 2
    assert len(Scorer(policy, ScoringPaths(merge_prefix_rows=False)).value_rows(chain)[0]) == 3
    assert policy.scoring.paths == ScoringPaths()  # building another scorer left the policy's alone
