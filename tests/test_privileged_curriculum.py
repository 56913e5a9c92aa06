"""A privileged critic and a range curriculum (`train --fast --privileged-critic --curriculum`): what they record, that
nothing of the critic reaches the deployed policy, that the curriculum really narrows what training draws, and the
refusals of what cannot work."""
import re, subprocess, sys
import numpy as np, pytest, torch
from ppo_trt.core.checkpoint import ObsNorm
from ppo_trt.core.files import BadInputError, load_json
from ppo_trt.envs.gym import parse_randomize, scale_ranges
from ppo_trt.export.onnx import export, onnx_metadata
from ppo_trt.studies.sweep import sweep_settings, train_policy
from ppo_trt.envs.batched.mujoco import BatchActionHistory, PrivilegedObs, batched_mujoco, set_env_ranges
from ppo_trt.train.fast_ppo import fast_train

K = 2


@pytest.fixture(scope='module')
def robust_run(tmp_path_factory):
    "History, privileged critic and a curriculum that widens at every judgement (threshold below any return)."
    d = tmp_path_factory.mktemp('robust')/'run'
    fast_train(d, env_id='Hopper-v4', timesteps=24_576, randomize='all', history=K, privileged_critic=True,
               curriculum=-1e9, progress=False, final_eval_episodes=2)
    export(d)
    return d


def test_records_say_how_it_was_trained(robust_run):
    rec, cfg = load_json(robust_run/'train.json'), load_json(robust_run/'config.json')
    critic, cur = rec['privileged_critic'], rec['curriculum']
    assert critic['features'][:6] == ['noise', 'delay', 'mass', 'friction', 'push', 'push_step']
    assert critic['critic_inputs'] == rec['obs_dim'] + K * rec['act_dim'] + len(critic['features'])
    assert cfg['privileged_critic'] is True and cfg['curriculum_return'] == cur['threshold'] == -1e9
    levels = [w['level'] for w in cur['widened']]
    assert levels == sorted(levels) and len(levels) == round(cur['final_level'] * cur['steps'])
    assert cur['final_ranges'] == scale_ranges(rec['randomize'], cur['final_level'])
    meta = onnx_metadata(robust_run/'policy.onnx')
    assert meta['privileged_critic'] == critic['features']
    assert meta['curriculum']['final_level'] == cur['final_level']


def test_nothing_of_the_critic_is_deployed(robust_run):
    "policy.onnx and obs_norm.json are as wide as the observation plus the history: the critic's columns stay behind."
    rec, meta = load_json(robust_run/'train.json'), onnx_metadata(robust_run/'policy.onnx')
    width = rec['obs_dim'] + K * rec['act_dim']
    assert meta['obs_dim'] == width and meta['history_actions'] == K
    assert len(ObsNorm.load(robust_run/'obs_norm.json').mean) == width


def test_a_curriculum_that_never_widens_trains_on_the_undisturbed_env(tmp_path):
    rec = fast_train(tmp_path/'run', env_id='Hopper-v4', timesteps=8192, randomize='all', curriculum=1e9,
                     progress=False, final_eval_episodes=1)
    assert rec.curriculum['final_level'] == 0.0 and rec.curriculum['widened'] == []
    assert rec.curriculum['final_ranges'] == scale_ranges(parse_randomize('all'), 0.0)


def test_set_env_ranges_reaches_every_layer_that_draws():
    "After the undisturbed ranges, every env of a randomized, noisy, delayed batch draws its nominal world."
    inner, _ = batched_mujoco('Hopper-v4', 8, seed=3, ranges='all')
    env = PrivilegedObs(BatchActionHistory(inner, K))
    set_env_ranges(env, scale_ranges(inner.ranges, 0.0), redraw=True)
    obs = env.reset(seed=3)
    for _ in range(30): obs, *_ = env.step(torch.zeros(8, 3))
    features = obs[:, env.policy_obs_dim:].numpy()
    names = env.feature_names
    np.testing.assert_array_equal(features[:, names.index('noise')], 0.0)
    np.testing.assert_array_equal(features[:, names.index('delay')], 0.0)
    np.testing.assert_allclose(features[:, names.index('mass')], 1.0)
    np.testing.assert_allclose(features[:, names.index('friction')], 1.0)


@pytest.mark.parametrize('kw, why', [
    (dict(privileged_critic=True), '--randomize'),
    (dict(curriculum=True), 'add --randomize'),
    (dict(randomize='all', privileged_critic=True, expert='zero'), 'drop --expert'),
    (dict(env_id='Walker2d-v4', randomize='mass', curriculum=True), '--curriculum-return R'),
])
def test_refused_before_anything_is_made(tmp_path, kw, why):
    kw = dict(dict(env_id='Hopper-v4'), **kw)
    with pytest.raises(BadInputError, match=re.escape(why)):
        fast_train(tmp_path/'run', timesteps=4096, progress=False, **kw)
    made = [p.name for p in (tmp_path/'run').iterdir()] if (tmp_path/'run').exists() else []
    assert made in ([], ['.ppo-trt.lock']), made  # the run folder's lock, nothing else


def test_cli_refuses_without_fast_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, '-m', 'ppo_trt.cli', 'train', '--env-id', 'Hopper-v4', '--curriculum',
                           '--randomize', 'all', '--run-dir', str(tmp_path/'run')], capture_output=True, text=True)
    assert done.returncode != 0 and 'Traceback' not in done.stderr
    assert '--curriculum applies only to the fast trainer' in done.stderr.strip().splitlines()[-1]


def test_sweep_refuses_critic_and_curriculum_with_sb3():
    with pytest.raises(BadInputError, match='fast PPO only'):
        sweep_settings('Hopper-v4', seeds=2, variants='nominal,randomized+history+critic+curriculum',
                       fast=False)


def test_sweep_variant_trains_with_every_addition(tmp_path):
    settings = sweep_settings('Hopper-v4', seeds=1, variants='randomized+history+critic+curriculum', fast=True,
                              timesteps=4096)
    rec = train_policy(tmp_path/'run', dict(settings, train_kwargs=dict(final_eval_episodes=1)),
                       'randomized+history+critic+curriculum', 0)
    assert rec.history_actions == 3 and rec.privileged_critic and rec.curriculum['threshold'] == 2000.0
    assert rec.randomize == parse_randomize(settings['randomize'])
