"""Hand-computed checks of marft_agents.ppo_math."""

from __future__ import annotations

import math

import pytest
import torch

from marft_agents import ppo_math as pm


def close(a, b, tol=1e-6):
    return torch.allclose(torch.as_tensor(a, dtype=torch.float32), torch.as_tensor(b, dtype=torch.float32), atol=tol)


# -- GAE -------------------------------------------------------------------------------------------
def test_gae_three_steps_by_hand():
    # gamma 0.9, lambda 0.8; reward only at the end.
    # t=2: delta = 1 - 0.7 = 0.3                      A2 = 0.3
    # t=1: delta = 0.9*0.7 - 0.6 = 0.03               A1 = 0.03 + 0.72*0.3   = 0.246
    # t=0: delta = 0.9*0.6 - 0.5 = 0.04               A0 = 0.04 + 0.72*0.246 = 0.21712
    adv, ret = pm.gae(
        torch.tensor([0.0, 0.0, 1.0]), torch.tensor([0.5, 0.6, 0.7]), torch.tensor([0, 0, 1]), 0.9, 0.8
    )
    assert close(adv, [0.21712, 0.246, 0.3])
    assert close(ret, [0.71712, 0.846, 1.0])


def test_gae_done_in_the_middle_stops_propagation():
    # Episode 1 = step 0 (done); episode 2 = steps 1-2.
    # t=2: A2 = 2 - 1 = 1; t=1: delta = 0.9*1 - 0.4 = 0.5, A1 = 0.5 + 0.72 = 1.22; t=0: A0 = 1 - 0.5.
    adv, _ = pm.gae(
        torch.tensor([1.0, 0.0, 2.0]), torch.tensor([0.5, 0.4, 1.0]), torch.tensor([1, 0, 1]), 0.9, 0.8
    )
    assert close(adv, [0.5, 1.22, 1.0])


def test_gae_lambda_one_is_monte_carlo_and_batched():
    rewards = torch.tensor([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]])  # [2, 3]
    values = torch.tensor([[0.2, 0.1, 0.3], [1.0, 2.0, 0.0]])
    dones = torch.tensor([[0, 0, 1], [0, 1, 1]])  # row 2: last entry is padding
    _, ret = pm.gae(rewards, values, dones, gamma=0.5, lam=1.0)
    # row 1: G = [1 + 0.5*0 + 0.25*2, 0 + 0.5*2, 2] ; row 2: [0 + 0.5*3, 3, pad]
    assert close(ret[0], [1.5, 1.0, 2.0])
    assert close(ret[1, :2], [1.5, 3.0])


def test_gae_bootstraps_last_value_and_per_step_gamma():
    # One step, not done, bootstrap V(s_1) = 2: A = 1 + 0.5*2 - 0 = 2
    adv, _ = pm.gae(torch.tensor([1.0]), torch.tensor([0.0]), torch.tensor([0]), 0.5, 1.0, torch.tensor(2.0))
    assert close(adv, [2.0])
    # Per-step gamma: [1.0, 0.5] with reward 1 at the end, lam = 1 -> returns [0.5... no: gamma_0 = 1
    _, ret = pm.gae(torch.tensor([0.0, 0.0, 1.0]), torch.zeros(3), torch.tensor([0, 0, 1]),
                    gamma=torch.tensor([1.0, 0.5, 0.9]), lam=1.0)
    assert close(ret, [0.5, 0.5, 1.0])


def test_gae_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="same shape"):
        pm.gae(torch.zeros(3), torch.zeros(2), torch.zeros(3))


def test_gae_token_level_bridges_into_next_agent():
    # Utterance 0 (agent A): values [0.1, 0.2]; utterance 1 (agent B): values [0.3]; reward 1 at the
    # end. Inside an utterance gamma_token = 1; between utterances gamma = 0.5; lambdas = 1.
    # t=2: A = 1 - 0.3 = 0.7
    # t=1 (A's last token, bridges into B's first): delta = 0.5*0.3 - 0.2 = -0.05, A = -0.05 + 0.5*0.7 = 0.3
    # t=0: delta = 0.2 - 0.1 = 0.1, A = 0.1 + 0.3 = 0.4
    (episode,) = pm.gae_token_level(
        [pm.TokenGAEInput([[0.1, 0.2], [0.3]], rewards=[0.0, 1.0], dones=[False, True])],
        gamma=0.5, lam=1.0, gamma_token=1.0, lam_token=1.0,
    )
    (adv0, ret0), (adv1, ret1) = episode
    assert close(adv0, [0.4, 0.3]) and close(adv1, [0.7])
    assert close(ret0, [0.5, 0.5]) and close(ret1, [1.0])


def test_gae_token_level_gamma_token_discounts_inside_utterance():
    (episode,) = pm.gae_token_level(
        [pm.TokenGAEInput([[0.0, 0.0, 0.0]], rewards=[1.0], dones=[True])], gamma=1.0, lam=1.0,
        gamma_token=0.5, lam_token=1.0,
    )
    assert close(episode[0][1], [0.25, 0.5, 1.0])


def test_gae_token_level_equals_action_level_for_one_token_utterances():
    values = [[0.3], [0.1], [0.7]]
    rewards, dones = [0.0, 1.0, 2.0], [False, True, True]
    (tok,) = pm.gae_token_level([pm.TokenGAEInput(values, rewards, dones)], gamma=0.9, lam=0.7)
    adv, _ = pm.gae_action_level(torch.tensor(rewards), torch.tensor(values).flatten(),
                                 torch.tensor(dones), 0.9, 0.7)
    assert close(torch.cat([a for a, _ in tok]), adv)


# -- losses ---------------------------------------------------------------------------------------
def test_huber_is_symmetric_and_matches_definition():
    x = torch.tensor([-3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0])
    h = pm.huber(x, 1.0)
    assert close(h, [2.5, 0.5, 0.125, 0.0, 0.125, 0.5, 2.5])
    assert close(h, pm.huber(-x, 1.0))


def test_policy_loss_takes_pessimistic_branch():
    ratio = torch.tensor([1.5, 1.5, 0.5, 0.5])
    adv = torch.tensor([1.0, -1.0, 1.0, -1.0])
    logp = torch.log(ratio).requires_grad_(True)
    loss, stats = pm.policy_loss(logp, torch.zeros(4), adv, clip_eps=0.2)
    # per element: max(-A r, -A clip(r)) = [-1.2, 1.5, -0.5, 0.8]
    assert close(loss, (-1.2 + 1.5 - 0.5 + 0.8) / 4)
    assert close(stats["clipfrac"], 0.5)
    loss.backward()
    # clipped branches (elements 0 and 3) carry no gradient; d(-A r)/dlogp = -A r elsewhere
    assert close(logp.grad, [0.0, 1.5 / 4, -0.5 / 4, 0.0])


def test_policy_loss_respects_mask_and_asymmetric_clip():
    logp = torch.log(torch.tensor([1.25, 9.0]))
    loss, _ = pm.policy_loss(logp, torch.zeros(2), torch.tensor([1.0, 100.0]), torch.tensor([1, 0]),
                             clip_eps=0.2, clip_eps_high=0.3)
    assert close(loss, -1.25)  # 1.25 is inside [0.8, 1.3]; the masked element is ignored


def test_value_loss_clipped_huber_both_signs():
    for sign in (1.0, -1.0):
        loss, _ = pm.value_loss(torch.tensor([sign * 1.0]), torch.tensor([0.0]), torch.tensor([sign * 2.0]),
                                clip_range=0.2, huber_delta=1.0)
        # unclipped error 1 -> 0.5; clipped V = 0.2 -> error 1.8 -> 1.8 - 0.5 = 1.3; max = 1.3
        assert close(loss, 1.3)
    loss, _ = pm.value_loss(torch.tensor([1.0]), torch.tensor([0.0]), torch.tensor([2.0]),
                            clip_range=None, huber_delta=None)
    assert close(loss, 0.5)


def test_approx_kl_k3_and_reference_kl():
    assert close(pm.approx_kl(torch.tensor([math.log(2.0)]), torch.tensor([0.0])), [1 - math.log(2.0)])
    assert close(pm.approx_kl(torch.tensor([0.3]), torch.tensor([0.3])), [0.0])
    x = torch.randn(1000)
    assert (pm.approx_kl(x, torch.zeros(1000)) >= 0).all()
    # value estimate of KL(cur || ref) with ref/cur = 2: 2 - 1 - log 2
    assert close(pm.kl_k3_estimate(torch.tensor([0.0]), torch.tensor([math.log(2.0)])), [1 - math.log(2.0)])
    # the loss form: k2 = (log cur - log ref)^2 / 2
    assert close(pm.kl_to_reference(torch.tensor([0.0]), torch.tensor([math.log(2.0)])), [0.5 * math.log(2.0) ** 2])


def _expected_estimator_gradient(estimator, logits, ref_logp):
    """Exact E_{x ~ pi}[grad estimator(log pi(x), log ref(x))] on a categorical: the samples
    come from the policy as it is (detached weights), the estimator is differentiated."""
    logp = torch.log_softmax(logits, -1)  # [V]
    weights = logp.detach().exp()  # [V] sampling distribution, no gradient through it
    (grad,) = torch.autograd.grad((weights * estimator(logp, ref_logp)).sum(), logits)
    return grad


def test_kl_to_reference_gradient_is_that_of_kl_policy_to_reference():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(5, generator=gen, dtype=torch.float64).requires_grad_(True)  # [V]
    ref_logp = torch.log_softmax(torch.randn(5, generator=gen, dtype=torch.float64), -1)  # [V]
    logp = torch.log_softmax(logits, -1)
    forward_kl = (logp.exp() * (logp - ref_logp)).sum()  # KL(pi || ref), exactly
    (exact,) = torch.autograd.grad(forward_kl, logits)
    estimated = _expected_estimator_gradient(pm.kl_to_reference, logits, ref_logp)
    assert torch.allclose(estimated, exact, atol=1e-12), (estimated, exact)
    # The k3 value estimate differentiated as a loss has the gradient of the reverse KL(ref || pi):
    # the reason it is not the loss.
    reverse_kl = (ref_logp.exp() * (ref_logp - torch.log_softmax(logits, -1))).sum()
    (reverse,) = torch.autograd.grad(reverse_kl, logits)
    k3 = _expected_estimator_gradient(pm.kl_k3_estimate, logits, ref_logp)
    assert torch.allclose(k3, reverse, atol=1e-12) and not torch.allclose(k3, exact, atol=1e-3)
    # and its value is unbiased for KL(pi || ref)
    value = (logp.detach().exp() * pm.kl_k3_estimate(logp.detach(), ref_logp)).sum()
    assert torch.allclose(value, forward_kl.detach())


def test_clipped_surrogate_and_value_elements_are_unreduced():
    logp = torch.log(torch.tensor([[1.5, 0.5], [1.0, 1.0]]))
    loss, clipped = pm.clipped_surrogate(logp, torch.zeros(2, 2), torch.tensor([[1.0, -1.0], [2.0, -2.0]]), 0.2)
    assert loss.shape == (2, 2) and close(loss, [[-1.2, 0.8], [-2.0, 2.0]])
    assert clipped.tolist() == [[True, True], [False, False]]
    v, vc = pm.value_loss_elements(torch.tensor([1.0, 0.0]), torch.zeros(2), torch.tensor([2.0, 0.5]), 0.2, None)
    assert close(v, [0.5 * 1.8 ** 2, 0.5 * 0.5 ** 2]) and vc.tolist() == [True, False]


def test_entropy_of_a_uniform_distribution_is_log_v():
    uniform = torch.log_softmax(torch.zeros(2, 4), dim=-1)  # [2, V=4]
    assert close(pm.entropy_from_logprobs(uniform), [math.log(4.0)] * 2, 1e-5)


def test_explained_variance_cases():
    t = torch.tensor([1.0, 2.0, 3.0, 4.0])
    assert close(pm.explained_variance(t, t), 1.0)
    assert close(pm.explained_variance(torch.full((4,), 2.5), t), 0.0)
    assert torch.isnan(pm.explained_variance(t, torch.ones(4)))
    # masked: only the first two count, predictions perfect there
    assert close(pm.explained_variance(torch.tensor([1.0, 2.0, 0.0]), torch.tensor([1.0, 2.0, 9.0]),
                                       torch.tensor([1, 1, 0])), 1.0)


def test_masked_mean_var_whiten():
    x = torch.tensor([[1.0, 2.0, 100.0], [3.0, 4.0, -50.0]])
    m = torch.tensor([[1, 1, 0], [1, 1, 0]])
    assert close(pm.masked_mean(x, m), 2.5)
    assert close(pm.masked_mean(x, m, dim=-1), [1.5, 3.5])
    assert close(pm.masked_var(x, m), torch.tensor([1.0, 2.0, 3.0, 4.0]).var())
    w = pm.masked_whiten(x, m)
    assert close(pm.masked_mean(w, m), 0.0, 1e-6)
    assert close(pm.masked_var(w, m, unbiased=False), 1.0, 1e-5)
    assert (w[:, 2] == 0).all()
    assert close(pm.masked_mean(torch.zeros(2), torch.zeros(2)), 0.0)  # empty mask: 0, not NaN


def test_sequence_logprob_sum_and_normalised():
    lp = torch.tensor([[-1.0, -2.0, -9.0], [-3.0, 0.0, 0.0]])
    m = torch.tensor([[1, 1, 0], [1, 0, 0]])
    assert close(pm.sequence_logprob(lp, m), [-3.0, -3.0])
    assert close(pm.sequence_logprob(lp, m, normalize=True), [-1.5, -3.0])


def test_entropy_into_a_reused_buffer_equals_the_fresh_formula_bit_for_bit():
    from marft_agents.ppo_math import entropy_from_logprobs

    logp = torch.log_softmax(torch.randn(3, 50, generator=torch.Generator().manual_seed(0)) * 40, -1)
    buffer = torch.full_like(logp, 7.0)  # stale contents must not leak into the result
    assert torch.equal(entropy_from_logprobs(logp, out=buffer), entropy_from_logprobs(logp))
    assert (logp < -80).any()  # the floor is exercised
