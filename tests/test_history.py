"""Policies that see their last K actions (`--history K`): trained by SB3 and fast PPO, exported with the history in
the input, deployed stateful on every CPU backend with parity over action sequences, and through the safe loop."""
import re, subprocess, sys
from pathlib import Path
import numpy as np, pytest
from ppo_trt.backends import registry as B
from ppo_trt.backends.runner import HistoryRunner
from ppo_trt.core.files import BadInputError, load_json
from ppo_trt.envs.controllers import pid_baseline, run_episode
from ppo_trt.envs.gym import ActionHistory, ActuationDelay, make_env
from ppo_trt.export.c_library import (write_c_library, build_and_test, compiler_missing, history_sequence,
                                      SEQ_EPISODE, SEQ_FALLBACK_EVERY, c_test_bound)
from ppo_trt.measure.c_loop import c_loop, c_loop_missing
from ppo_trt.export.onnx import export, onnx_metadata
from ppo_trt.measure.evaluate import ControlLoop
from ppo_trt.train.fast_ppo import fast_train
from ppo_trt.train.sb3 import train

K = 2
CPU_BACKENDS = ('sb3', 'torch', 'torch-compile', 'ort', 'ort-iobind', 'native', 'native-c')


@pytest.fixture(scope='module')
def fast_run(tmp_path_factory):
    d = tmp_path_factory.mktemp('history')/'fast'
    fast_train(d, env_id='Hopper-v4', timesteps=16_384, history=K, progress=False, final_eval_episodes=2)
    export(d)
    return d


@pytest.fixture(scope='module')
def sb3_run(tmp_path_factory):
    d = tmp_path_factory.mktemp('history')/'sb3'
    train(d, 'Hopper-v4', preset_name='smoke', timesteps=512, history=K, eval_freq=256, n_eval_episodes=1,
          final_eval_episodes=1, progress=False)
    export(d)
    return d


def _episodes(runner, seeds=(0, 1), delay=2, max_steps=150):
    "Observations, actions and episode starts of `runner` driving Hopper under an actuation delay."
    env, obs_seq, act_seq, starts = ActuationDelay(make_env('Hopper-v4'), steps=delay), [], [], []
    for seed in seeds:
        obs, _ = env.reset(seed=seed); runner.reset()
        for t in range(max_steps):
            a = runner(np.asarray(obs, np.float32)[None])[0]
            obs_seq.append(np.asarray(obs, np.float32)); act_seq.append(a); starts.append(t == 0)
            obs, _, term, trunc, _ = env.step(a)
            if term or trunc: break
    return np.array(obs_seq), np.array(act_seq), np.array(starts)


def _replay(runner, obs_seq, starts):
    "The actions of `runner` fed the same observations, reset where the episodes started."
    out = []
    for obs, start in zip(obs_seq, starts):
        if start: runner.reset()
        out.append(runner(obs[None])[0])
    return np.array(out)


def test_records_and_metadata_say_history(fast_run):
    t, meta = load_json(fast_run/'train.json'), onnx_metadata(fast_run/'policy.onnx')
    assert t['history_actions'] == K and t['obs_dim'] == 11 and load_json(fast_run/'config.json')['history_actions'] == K
    assert (meta['history_actions'], meta['obs_dim'], meta['env_obs_dim']) == (K, 11 + 3 * K, 11)
    wide = np.load(fast_run/'export_obs.npy')
    assert wide.shape == (1000, 11 + 3 * K)
    history = wide[:, 11:]
    assert np.abs(history).max() <= 1.0 and np.abs(history).max() > 0.1  # clipped actions, really recorded
    same_episode = np.any(history[1:] != 0, axis=1)  # a zero memory starts an episode
    np.testing.assert_array_equal(history[1:, 3:][same_episode], history[:-1, :3][same_episode])  # shifted by one


def test_sequence_parity_on_every_cpu_backend(fast_run):
    "Every CPU backend, stateful, replays ORT's closed-loop episodes (two, under a 2-step delay) within 1e-5."
    ort = B.load('ort', fast_run)
    assert isinstance(ort, HistoryRunner) and ort.obs_dim == 11
    obs_seq, ort_actions, starts = _episodes(ort)
    assert len(obs_seq) > 20 and starts.sum() == 2
    for name in CPU_BACKENDS:
        if not B.available()[name][0]: continue
        r = B.load(name, fast_run)
        assert isinstance(r, HistoryRunner) and r.info['history_actions'] == K, name
        np.testing.assert_allclose(_replay(r, obs_seq, starts), ort_actions, atol=1e-5, err_msg=name)


def test_runner_rebuilds_the_training_input(fast_run):
    "The history the runner keeps is the one `ActionHistory` gave the policy in training, step for step."
    net, deployed = B.load('ort', fast_run, network_only=True), B.load('ort', fast_run)
    assert net.obs_dim == 11 + 3 * K and not isinstance(net, HistoryRunner)
    env = ActionHistory(ActuationDelay(make_env('Hopper-v4'), steps=2), K)
    wide, _ = env.reset(seed=3); deployed.reset()
    for _ in range(60):
        a = net(wide[None].astype(np.float32))[0]
        np.testing.assert_array_equal(deployed(wide[None, :11].astype(np.float32))[0], a)
        np.testing.assert_array_equal(deployed.history[0], wide[11:])
        wide, _, term, trunc, _ = env.step(a)
        if term or trunc: break


def test_control_loop_commits_the_applied_action(fast_run):
    "After a missed deadline the loop applies PID's action, and the policy's memory holds that action, not its own."
    runner = B.load('ort', fast_run)
    loop = ControlLoop(runner, pid_baseline('Hopper-v4'), deadline_us=0.0)  # every call misses: PID acts
    env = make_env('Hopper-v4')
    obs, _ = env.reset(seed=0); loop.reset()
    applied = []
    for _ in range(5):
        a = loop.step(obs); applied.append(np.clip(a, -1, 1))
        obs, *_ = env.step(a)
    loop.step(obs)
    np.testing.assert_array_equal(runner.history[0], np.concatenate(applied[::-1][:K]))
    assert {e.kind for e in loop.events} == {'deadline'}


def test_evaluated_through_run_episode(fast_run):
    "run_episode resets the runner per episode: the same seed gives the same return twice, as a memoryless policy."
    r, env = B.load('native-c' if B.available()['native-c'][0] else 'ort', fast_run), make_env('Hopper-v4')
    assert run_episode(env, r, 5) == run_episode(env, r, 5)


def test_sb3_trains_and_deploys_with_history(sb3_run):
    assert load_json(sb3_run/'train.json')['history_actions'] == K
    sb3, ort = B.load('sb3', sb3_run), B.load('ort', sb3_run)
    assert isinstance(sb3, HistoryRunner)
    obs_seq, ort_actions, starts = _episodes(ort, seeds=(4,), max_steps=60)
    np.testing.assert_allclose(_replay(sb3, obs_seq, starts), ort_actions, atol=1e-5)


def test_resume_with_another_history_refused(sb3_run):
    before = (sb3_run/'train.json').read_bytes()
    with pytest.raises(BadInputError, match='--history 2, not 0'):
        train(sb3_run, 'Hopper-v4', preset_name='smoke', timesteps=1024, resume=True, history=0, progress=False)
    assert (sb3_run/'train.json').read_bytes() == before


def test_bad_history_settings(tmp_path, fast_run):
    with pytest.raises(BadInputError, match='drop one of them'):
        fast_train(tmp_path/'r', env_id='Hopper-v4', timesteps=2048, history=2, expert='pid', progress=False)
    assert {f.name for f in (tmp_path/'r').iterdir()} <= {'.ppo-trt.lock'}  # refused before anything was written
    r = subprocess.run([sys.executable, '-m', 'ppo_trt.cli', 'train', '--fast', '--env-id', 'Hopper-v4', '--history',
                        '17', '--run-dir', str(tmp_path/'s')], capture_output=True, text=True)
    assert r.returncode == 2 and 'must be >= 0 and <= 16' in r.stderr and 'Traceback' not in r.stderr


@pytest.mark.skipif(bool(compiler_missing('cc')), reason=compiler_missing('cc') or 'cc')
def test_c_library_keeps_the_memory(fast_run, tmp_path):
    "ppo_policy_step / ppo_policy_commit over a sequence with resets and fallbacks: the runner's actions, to the float32 bound."
    folder = Path(write_c_library(fast_run, tmp_path/'c')['path'])
    header = (folder/'ppo_policy.h').read_text()
    assert f'#define PPO_POLICY_HISTORY_ACTIONS {K}' in header and 'ppo_policy_memory' in header
    built = build_and_test(folder)
    assert built['ok'] and not built['warnings'], built
    error = float(re.search(r'memory of \d+ actions: .* max abs err (\S+)', built['output']).group(1))
    tol = float(re.search(r'#define PPO_TEST_TOL (\S+)', (folder/'ppo_policy_vectors.h').read_text()).group(1))
    assert error <= tol <= c_test_bound([10.0])  # actions of a few units: a bound of ten at most
    # the sequence the C test holds is the Python runner's, fallbacks committed as ControlLoop commits them
    obs, runner = np.load(fast_run/'export_obs.npy'), B.load('ort', fast_run)
    rec = load_json(fast_run/'train.json')
    network = B.load('ort', fast_run, network_only=True)
    seq = history_sequence(lambda x: network(x).copy(), obs[:, :runner.obs_dim], K, rec['action_low'],
                           rec['action_high'])
    for r in range(len(obs)):
        if r % SEQ_EPISODE == 0: runner.reset()
        np.testing.assert_allclose(runner(obs[r:r + 1, :runner.obs_dim])[0], seq['act'][r], atol=1e-6)
        if r % SEQ_FALLBACK_EVERY == SEQ_FALLBACK_EVERY - 1: runner.commit(seq['fallback'][r:r + 1])
    # a memory that forgets the fallback's action fails its own test
    source = (folder/'ppo_policy.c').read_text()
    (folder/'ppo_policy.c').write_text(source.replace('    record(memory, applied);\n', ''))
    assert not build_and_test(folder)['ok']


def test_memoryless_policies_stay_plain(run_dir):
    assert not isinstance(B.load('ort', run_dir), HistoryRunner)
    assert 'history_actions' not in onnx_metadata(run_dir/'policy.onnx')


@pytest.mark.skipif(bool(c_loop_missing()), reason=c_loop_missing() or 'the C loop builds here')
def test_c_loop_drives_the_memory(fast_run):
    "Hopper in C through ppo_policy_step: gymnasium's steps, the Python native-c returns to the bit, the fallback held."
    rec = c_loop(fast_run, steps=5_000, episodes=3)
    assert rec.check.passed and rec.fallback.passed, (rec.check, rec.fallback)
    assert rec.returns == rec.python_returns['ppo:native-c']  # the same memory rule, bit for bit
