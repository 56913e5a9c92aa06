"MujocoBatched: Hopper randomized in mass, friction and push, stepped as one mujoco.batch, equal to gymnasium's."
import numpy as np, pytest, torch
from ppo_trt.envs.batched.mujoco import (MujocoBatched, GymnasiumBatched, EnvPoolBatched, BatchDisturbances,
                                         batched_mujoco, mujoco_batched_trajectories)


@pytest.mark.parametrize('env_id', ['Hopper-v4', 'Hopper-v5'])
@pytest.mark.parametrize('ranges', [None, 'all'])
def test_matches_gymnasium_step_by_step(env_id, ranges):
    "Random actions: many short episodes, so restarts and their draws are compared too; float64, to the bit."
    r = mujoco_batched_trajectories(env_id, ranges, num_envs=4, steps=300, seed=3)
    assert r['episodes'] >= 20, r
    assert r['obs_gap'] <= 1e-9 and r['reward_gap'] <= 1e-9, r
    assert r['terminated_mismatches'] == r['truncated_mismatches'] == r['draw_mismatches'] == 0, r


def test_time_limit_and_pushes_match_gymnasium():
    "An env kept up by the PID baseline reaches the 1000-step limit (and its push) exactly as gymnasium's does."
    r = mujoco_batched_trajectories('Hopper-v4', 'mass,friction,push', num_envs=2, steps=1010, seed=0, pid_envs=1)
    assert r['truncations'] == 1 and r['episodes'] > 20, r
    assert r['obs_gap'] <= 1e-9 and r['reward_gap'] <= 1e-9, r
    assert r['terminated_mismatches'] == r['truncated_mismatches'] == r['draw_mismatches'] == 0, r


def test_shapes_and_same_step_reset():
    env = MujocoBatched('Hopper-v4', 3, seed=1, ranges='all', num_threads=2)
    obs = env.reset()
    assert obs.shape == (3, 11) and obs.dtype == torch.float32 and env.num_threads == 2
    assert (env.discrete_actions, env.obs_dim, env.act_dim, env.max_episode_steps) == (0, 11, 3, 1000)
    ended = 0
    for _ in range(80):  # full throttle: every Hopper falls within a few dozen steps
        obs, reward, term, trunc, info = env.step(torch.ones(3, 3))
        assert reward.dtype == torch.float32 and term.dtype == trunc.dtype == torch.bool
        done = info['done']
        assert torch.equal(done, term | trunc) and torch.equal(obs[~done], info['final_obs'][~done])
        for i in torch.nonzero(done).flatten().tolist():
            assert abs(float(obs[i, 0]) - 1.25) < 0.01 and not torch.equal(obs[i], info['final_obs'][i])
            ended += 1
    assert ended >= 3


@pytest.mark.parametrize('make, msg', [
    (lambda: MujocoBatched('Hopper-v4', 0), 'num_envs must be >= 1, got 0'),
    (lambda: MujocoBatched('Hopper-v4', 2, ranges='mass=2:1'), 'empty range'),
    (lambda: MujocoBatched('Walker2d-v4', 2, ranges='mass'), 'reproduces Hopper-v4, Hopper-v5 only, not Walker2d-v4'),
    (lambda: MujocoBatched('Hopper-v4', 2).step(torch.zeros(3, 3)), 'actions must have shape (2, 3), got (3, 3)'),
    (lambda: MujocoBatched('Hopper-v4', 2).step(np.full((2, 3), np.nan)), 'an action is NaN or infinite'),
    (lambda: MujocoBatched('Hopper-v4', 2).step(torch.zeros(2)), 'actions must have shape (2, 3), got (2,)')])
def test_bad_input_one_line(make, msg):
    "The same one-line errors as EnvPoolBatched and GymnasiumBatched give."
    from ppo_trt.core.files import BadInputError
    with pytest.raises(BadInputError) as e: make()
    assert msg in str(e.value) and '\n' not in str(e.value)


def test_refused_action_changes_nothing():
    "A NaN action is refused before any env moves: the next good step is the one it would have been."
    a, b = MujocoBatched('Hopper-v4', 2, seed=4, ranges='all'), MujocoBatched('Hopper-v4', 2, seed=4, ranges='all')
    with pytest.raises(Exception): a.step(np.array([[0.1, 0.2, np.nan], [0, 0, 0]]))
    act = np.full((2, 3), 0.3)
    assert all(np.array_equal(x, y) for x, y in zip(a.step_float64(act), b.step_float64(act)))


def test_batched_mujoco_picks_the_batch_for_hopper():
    env, how = batched_mujoco('Hopper-v4', 4, seed=0, ranges='all', num_threads=2)
    assert isinstance(env, BatchDisturbances) and isinstance(env.env, MujocoBatched), how
    assert how.startswith('mujoco.batch ') and how.endswith('per-env models (2 threads)'), how
    env, how = batched_mujoco('Hopper-v5', 4, ranges='mass,push')
    assert type(env) is MujocoBatched and how.startswith('mujoco.batch'), how
    env, how = batched_mujoco('Hopper-v4', 4, ranges=None, num_threads=1)  # nominal Hopper: the batch as well
    assert type(env) is MujocoBatched and how.startswith('mujoco.batch') and '(1 thread)' in how, how
    env, how = batched_mujoco('Walker2d-v4', 4, ranges=None, num_threads=1)
    assert type(env) is EnvPoolBatched and how.startswith('envpool'), how
    env, how = batched_mujoco('Walker2d-v4', 4, ranges='friction')
    assert type(env) is GymnasiumBatched and 'mujoco.batch runs Hopper-v4, Hopper-v5 only' in how, how


@pytest.mark.slow  # over 4.5 s: with the long checks (pytest -m slow tests)
def test_fast_train_randomize_all_steps_the_batch(tmp_path):
    "The trainer gets the batch for `--randomize all` on Hopper and records it, with the ranges, in train.json."
    from conftest import ppo_trt
    from ppo_trt.core.files import load_json
    r = ppo_trt('train', '--fast', '--env-id', 'Hopper-v4', '--timesteps', 2048, '--randomize', 'all',
                '--run-dir', tmp_path/'r')
    assert r.returncode == 0, r.stderr[-2000:]
    rec = load_json(tmp_path/'r'/'train.json')
    assert rec['env_backend'].startswith('mujoco.batch ') and 'per-env models' in rec['env_backend'], rec['env_backend']
    assert set(rec['randomize']) == {'noise', 'delay', 'mass', 'friction', 'push'} and rec['timesteps'] == 2048
