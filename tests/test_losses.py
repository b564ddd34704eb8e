"""The losses and targets of SAC and TD3/DDPG and the shared gradient step, against numbers
worked out by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from agents import common, sac, td3
from agents.config import HyperParams
from agents.offpolicy import q_regression_loss
from agents.optim import adam


def fixed_q(values):
    """A 'Q network' whose parameters are its outputs: apply(params, obs, action) = params."""
    return lambda params, obs, action=None: params


def test_soft_td_target_by_hand():
    # r=2 (scaled by 0.5 -> 1), gamma 0.9, min(3, 5) = 3, alpha 0.5, log pi = -2: soft value 3 + 1 = 4
    # -> 1 + 0.9 * 4 = 4.6; the terminated row keeps only its reward: 0.5 * 2 = 1.
    y = sac.soft_td_target(jnp.array([2.0, 2.0]), jnp.array([0.0, 1.0]), jnp.array([[3.0, 5.0], [3.0, 5.0]]),
                           jnp.array([-2.0, -2.0]), alpha=0.5, discount=0.9, reward_scaling=0.5)
    np.testing.assert_allclose(y, [4.6, 1.0], rtol=1e-6)


def test_q_regression_loss_by_hand():
    # two heads, two rows: errors (1, -1) and (2, 0) -> 0.5 * mean(1 + 1, 4 + 0) = 1.5; mean Q = 1.5
    q = jnp.array([[2.0, 0.0], [3.0, 1.0]])
    loss, q_mean = q_regression_loss(q, fixed_q(q), None, None, jnp.array([1.0, 1.0]))
    assert float(loss) == pytest.approx(1.5) and float(q_mean) == pytest.approx(1.5)
    # no gradient flows into the target
    grad = jax.grad(lambda t: q_regression_loss(q, fixed_q(q), None, None, t)[0])(jnp.array([1.0, 1.0]))
    np.testing.assert_array_equal(grad, [0.0, 0.0])


def test_sac_actor_loss_by_hand():
    # policy output (loc 0, pre-std s with softplus(s) + 1e-3 = 1), noise 0: a = tanh(0) = 0,
    # log pi(a) = log N(0; 0, 1) - log(1 - tanh(0)^2) = -0.5 log(2 pi); Q heads (1, 3): min 1.
    pre_std = float(np.log(np.expm1(1.0 - 1e-3)))
    raw = jnp.array([[0.0, pre_std]])
    loss, log_prob = sac.actor_loss(raw, jnp.array([[1.0, 3.0]]), jnp.zeros((1, 1)), jnp.zeros((1, 1)),
                                    lambda p, obs: p, fixed_q(None), alpha=0.2)
    want_logp = -0.5 * np.log(2 * np.pi)
    assert float(log_prob[0]) == pytest.approx(want_logp, rel=1e-5)
    assert float(loss) == pytest.approx(0.2 * want_logp - 1.0, rel=1e-5)


def test_sac_alpha_loss_by_hand():
    """loss = -log_alpha * (log pi + target entropy): its gradient -(log pi + target) makes a
    descent step raise alpha while the entropy (-log pi) is below target and lower it above."""
    def loss_and_grad(log_pi):
        fn = lambda la: sac.alpha_loss(la, jnp.array([log_pi]), target_entropy=1.0)[0]  # noqa: E731
        return float(fn(jnp.asarray(0.3))), float(jax.grad(fn)(jnp.asarray(0.3)))

    assert loss_and_grad(-0.5) == pytest.approx((-0.3 * 0.5, -0.5))  # entropy 0.5 < 1: alpha rises
    assert loss_and_grad(-3.0) == pytest.approx((0.3 * 2.0, 2.0))  # entropy 3 > 1: alpha falls


def test_td3_target_and_smoothing_by_hand():
    y = td3.td_target(jnp.array([1.0, 1.0]), jnp.array([0.0, 1.0]), jnp.array([[2.0, 4.0], [2.0, 4.0]]),
                      discount=0.5, reward_scaling=2.0)
    np.testing.assert_allclose(y, [2.0 + 0.5 * 2.0, 2.0])
    # noise 0.2 * [10, -1, 1] clipped to [0.5, -0.2, 0.2], added, then the action clipped to [-1, 1]
    a = td3.smoothed_action(jnp.array([0.8, 0.0, -0.1]), jnp.array([10.0, -1.0, 1.0]), noise_scale=0.2,
                            noise_clip=0.5)
    np.testing.assert_allclose(a, [1.0, -0.2, 0.1], rtol=1e-6)


def test_td3_actor_loss_uses_the_first_critic():
    loss, _ = td3.actor_loss(None, jnp.array([[3.0, -7.0], [1.0, 9.0]]), jnp.zeros((2, 1)),
                             lambda p, obs: jnp.zeros((2, 1)), fixed_q(None))
    assert float(loss) == pytest.approx(-2.0)




def test_gradient_step_is_clip_then_adam_scaled_by_lr():
    params = {"w": jnp.array([1.0, -2.0, 3.0])}

    def loss(p, x):
        return jnp.sum(p["w"] * x) ** 2, None

    x = jnp.array([0.5, 1.0, -1.0])
    reference = optax.chain(optax.clip_by_global_norm(0.3), optax.adam(0.01))
    want_state = reference.init(params)
    hp = HyperParams({"learning_rate": jnp.float32(0.01), "max_grad_norm": jnp.float32(0.3)})
    optimizer = adam()
    state = optimizer.init(params, hp)
    for _ in range(3):
        grads = jax.grad(lambda p: loss(p, x)[0])(params)
        updates, want_state = reference.update(grads, want_state, params)
        want = optax.apply_updates(params, updates)
        got, state, value, _ = common.gradient_step(loss, params, state, x, optimizer=optimizer, hp=hp)
        np.testing.assert_allclose(got["w"], want["w"], rtol=1e-6)
        assert float(value) == pytest.approx(float(loss(params, x)[0]))
        params = got


def test_schedules_by_hand():
    assert float(common.linear_decay(1.0, 0.1, 0.5, 0.25)) == pytest.approx(0.55)
    assert float(common.linear_decay(1.0, 0.1, 0.5, 0.9)) == pytest.approx(0.1)
    hp = HyperParams({"learning_rate": jnp.float32(1.0), "max_grad_norm": jnp.float32(jnp.inf)})
    state = adam().init({"w": jnp.zeros(2)}, hp)._replace(count=jnp.asarray(30, jnp.int32))
    assert float(common.annealed(2.0, state, 40)) == pytest.approx(0.5)
    q = jnp.array([[0.0, 1.0, 0.0]] * 1000)
    greedy = common.epsilon_greedy(q, jax.random.PRNGKey(0), 0.0)
    assert np.all(np.asarray(greedy) == 1)
    mixed = np.asarray(common.epsilon_greedy(q, jax.random.PRNGKey(0), 0.3))
    # a random action is the greedy one a third of the time: P(not greedy) = 0.3 * 2/3 = 0.2
    assert abs(np.mean(mixed != 1) - 0.2) < 0.05 and mixed.dtype == np.int32
