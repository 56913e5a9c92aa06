"""Automatic domain randomization (`train --fast --adr`): each bound moves on its own test episodes, never past the
--randomize bound or the nominal value; pinned test episodes run at the bound in every layer that draws; what the
records and the ONNX metadata keep."""
import numpy as np, pytest, torch
from ppo_trt.core.files import BadInputError, load_json
from ppo_trt.envs.gym import parse_randomize, scale_ranges
from ppo_trt.export.onnx import export, onnx_metadata
from ppo_trt.envs.batched.mujoco import (GymnasiumBatched, MujocoBatched, PrivilegedObs, TENSOR_RANDOMIZABLE,
                                        batched_mujoco, pin_draws)
from ppo_trt.train.fast_ppo import ADR, ADRDraws, AdaptiveRanges, check_curriculum, fast_train

FULL = parse_randomize('all')


def test_each_bound_moves_on_its_own_tests():
    adr = AdaptiveRanges(FULL, ADR(2000.0, 1000.0, episodes=3, steps=5))
    assert sorted(adr.bounds) == sorted([('noise', 'high'), ('delay', 'high'), ('mass', 'low'), ('mass', 'high'),
                                         ('friction', 'low'), ('friction', 'high'), ('push', 'high')])
    assert adr.ranges == scale_ranges(FULL, 0.0)
    for t in range(3): adr.observe(('friction', 'low'), 2500.0, t)
    assert adr.ranges['friction'] == [pytest.approx(0.88), 1.0] and adr.ranges['mass'] == [1.0, 1.0]
    for t in range(100): adr.observe(('friction', 'low'), 5000.0, t)  # never past the --randomize bound
    assert adr.ranges['friction'][0] == pytest.approx(0.4) and adr.level[('friction', 'low')] == 5
    for t in range(100): adr.observe(('friction', 'low'), 0.0, t)     # never past the nominal value
    assert adr.ranges['friction'] == [1.0, 1.0]
    moves = [c['level'] for c in adr.changes if c['knob'] == 'friction']
    assert moves == [0.2, 0.4, 0.6, 0.8, 1.0, 0.8, 0.6, 0.4, 0.2, 0.0]


def test_returns_between_the_thresholds_hold_the_bound():
    adr = AdaptiveRanges(FULL, ADR(2000.0, 1000.0, episodes=2))
    for t in range(20): adr.observe(('delay', 'high'), 1500.0, t)
    assert adr.changes == [] and adr.ranges['delay'] == [0, 0]


def test_rule_checked_and_filled_from_the_spec():
    assert check_curriculum('Hopper-v4', FULL, ADR()) == ADR(2000.0, 1000.0)
    for bad in (ADR(high=1.0, low=2.0), ADR(episodes=0), ADR(test_share=0.0), ADR(steps=0)):
        with pytest.raises(BadInputError, match='ADR needs'): check_curriculum('Hopper-v4', FULL, bad)
    with pytest.raises(BadInputError, match=r'give ADR\(high=..., low=...\)'):
        check_curriculum('Walker2d-v4', parse_randomize('mass'), ADR())


def test_pinned_episodes_run_at_the_bound_in_either_stepper():
    "MujocoBatched and gymnasium's envs, pinned alike at every episode start, step identically."
    env, ref = MujocoBatched('Hopper-v4', 4, 2, 'mass,friction,push'), GymnasiumBatched('Hopper-v4', 4, 2,
                                                                                          'mass,friction,push')
    env.reset_float64(); ref.vec.reset(seed=2)
    rng, ends = np.random.default_rng(0), 0
    for t in range(300):
        a = rng.uniform(-1, 1, (4, 3))
        obs, reward, term, trunc, _ = env.step_float64(a)
        ref_obs, ref_reward, *_ = ref.vec.step(a)
        np.testing.assert_array_equal(obs, ref_obs); np.testing.assert_array_equal(reward, ref_reward)
        done = np.flatnonzero(term | trunc)
        for knob, value in (('mass', 1.4), ('friction', 0.4), ('push', 200.0)):
            assert env.pin(done, knob, value) and ref.pin(done, knob, value)
        ends += len(done)
    assert ends > 4
    col = env.param_names.index('mass')
    assert all(env.param_values[i, col] == np.float32(1.4) for i in range(4) if env.params[i]['mass'] == 1.4)


def test_adr_draws_feed_the_features_and_freeze():
    inner, _ = batched_mujoco('Hopper-v4', 6, seed=0, ranges='all')
    adr = AdaptiveRanges(inner.ranges, ADR(-1e9, -2e9, episodes=1), seed=0)
    draws = ADRDraws(inner, adr)
    env = PrivilegedObs(draws)
    env.reset(seed=0)
    for _ in range(600): env.step(torch.ones(6, 3))
    assert adr.changes and all(lv > 0 for lv in adr.level.values())
    frozen = dict(adr.level)
    draws.frozen = True
    for _ in range(300): env.step(torch.ones(6, 3))
    assert adr.level == frozen and all(t is None for t in draws.testing)  # no tests, no moves once frozen
    assert not pin_draws(env, [0], 'earthquake', 1.0)


@pytest.mark.slow  # over 9 s on a slow 2-core box: with the long checks (pytest -m slow tests)
def test_fast_train_with_adr_records_its_moves(tmp_path):
    rec = fast_train(tmp_path/'run', env_id='Hopper-v4', timesteps=8 * 2048, randomize='all', history=2,
                     privileged_critic=True, curriculum=ADR(-1e9, -2e9, episodes=2), progress=False,
                     final_eval_episodes=1)
    cur, cfg = rec.curriculum, load_json(tmp_path/'run'/'config.json')
    assert cur['rule'] == 'adr' and cur['changes'] and cfg['adr']['high'] == -1e9 and cfg['curriculum_return'] is None
    steps = [c['timesteps'] for c in cur['changes']]
    assert steps == sorted(steps) and steps[-1] <= rec.timesteps
    for knob, (lo, hi) in cur['final_ranges'].items():  # inside the --randomize ranges, around the nominal value
        assert FULL[knob][0] <= lo <= hi <= FULL[knob][1]
    export(tmp_path/'run')
    meta = onnx_metadata(tmp_path/'run'/'policy.onnx')
    assert meta['curriculum']['rule'] == 'adr' and meta['curriculum']['final_ranges'] == cur['final_ranges']


def test_adr_that_never_widens_keeps_the_nominal_world(tmp_path):
    rec = fast_train(tmp_path/'run', env_id='Hopper-v4', timesteps=4 * 2048, randomize='all',
                     curriculum=ADR(1e9, -1e9), progress=False, final_eval_episodes=1)
    assert rec.curriculum['changes'] == [] and rec.curriculum['final_ranges'] == scale_ranges(FULL, 0.0)
