"Batched torch envs (gymnasium parity, compiled step, bad input) and on-device PPO through the CLI and the pipeline."
import numpy as np, pytest, torch
from conftest import ppo_trt
from ppo_trt.core.files import BadInputError, load_json
from ppo_trt.envs.specs import env_ids
from ppo_trt.envs.batched.torch import make_batched, gym_trajectories, fused_step, count_sync_ops, device_rollout


@pytest.mark.parametrize('env_id', env_ids('batched'))
def test_matches_gymnasium(env_id):
    r = gym_trajectories(env_id, num_envs=16, steps=400, seed=7, dtype='float64')
    assert r['termination_mismatches'] == 0 and r['max_abs_obs'] < 1e-6, r
    r = gym_trajectories(env_id, num_envs=16, steps=400, seed=7, dtype='float32', resync=True)
    assert r['termination_mismatches'] == 0 and r['max_abs_obs'] < 1e-5, r


def test_compiled_step_equals_eager():
    a, b = make_batched('CartPole-v1', 256, seed=3), make_batched('CartPole-v1', 256, seed=3)
    step, how = fused_step(b)
    assert how == 'compiled', how  # a C++ compiler is part of the test machine's setup
    b.gen.manual_seed(3); b.reset(seed=3); a.reset(seed=3)
    acts = torch.randint(0, 2, (100, 256), generator=torch.Generator().manual_seed(0))
    for t in range(100):  # fused kernels round differently (FMA): ~1e-6 after 90 steps, so compare within 1e-4
        oa, ra, ta, _, _ = a.step(acts[t]); ob, rb, tb, _, _ = step(acts[t])
        assert torch.equal(ta, tb) and torch.allclose(oa, ob, atol=1e-4), t


def test_rollout_reads_nothing_back():
    env = make_batched('MountainCarContinuous-v0', 128)
    mlp = torch.nn.Sequential(torch.nn.Linear(2, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    assert count_sync_ops(lambda: device_rollout(env, mlp, 40)) == {}


@pytest.mark.parametrize('make, msg', [
    (lambda: make_batched('CartPole-v1', -3), 'positive integer'),
    (lambda: make_batched('Acrobot-v1', 4), "unknown environment id 'Acrobot-v1'"),
    (lambda: make_batched('Hopper-v4', 4), 'no batched version of Hopper-v4'),
    (lambda: make_batched('Pendulum-v1', 4, device='cuda:9'), 'cuda'),
    (lambda: make_batched('Pendulum-v1', 4).step(torch.zeros(4, 2)), 'shape (4, 1)'),
    (lambda: make_batched('CartPole-v1', 4).step(torch.zeros(4, dtype=torch.float32)), 'integer action indices'),
])
def test_bad_input(make, msg):
    with pytest.raises(BadInputError, match=None) as e: make()
    assert msg in str(e.value)


@pytest.mark.slow
def test_fast_train_cli_solves_cartpole(tmp_path):
    r = ppo_trt('train', '--fast', '--env-id', 'CartPole-v1', '--run-dir', tmp_path/'cp')
    assert r.returncode == 0, r.stderr[-2000:]
    rec = load_json(tmp_path/'cp'/'train.json')
    assert rec['solved'] and rec['final_eval_mean'] >= 475 and rec['trainer'] == 'ppo_trt.train.fast_ppo'
    r = ppo_trt('export', '--run-dir', tmp_path/'cp')
    assert r.returncode == 2 and 'discrete actions' in r.stderr


@pytest.mark.slow
def test_fast_pendulum_through_export_and_bench(tmp_path):
    d = tmp_path/'pend'
    r = ppo_trt('run', '--fast', '--env-id', 'Pendulum-v1', '--timesteps', 8192, '--run-dir', d, '--warmup', 10,
                '--iters', 100, '--batches', '1,64', '--sweep-seconds', 0.02, '--closed-loop-steps', 100)
    assert r.returncode == 0, r.stderr[-2000:]
    bench = load_json(d/'bench.json')
    ran = {x['backend'] for x in bench['records'] if x['ran']}
    assert {'sb3', 'torch', 'ort'} <= ran
    assert (d/'report.html').exists()


def test_fast_bad_input(tmp_path):
    r = ppo_trt('train', '--fast', '--env-id', 'CartPole-v1', '--cudagraphs', '--run-dir', tmp_path/'x')
    assert r.returncode == 2 and ('needs a CUDA device' in r.stderr or torch.cuda.is_available())
    r = ppo_trt('run', '--fast', '--run-dir', tmp_path/'y')
    assert r.returncode == 2 and 'needs continuous actions' in r.stderr
    r = ppo_trt('train', '--fast', '--env-id', 'Acrobot-v1', '--run-dir', tmp_path/'z')
    assert r.returncode == 2 and "unknown environment id 'Acrobot-v1'" in r.stderr and 'Hopper-v4' in r.stderr
    assert not (tmp_path/'z').exists()


@pytest.mark.slow
def test_fast_hopper_run_through_evaluate(tmp_path):
    "A tiny fast Hopper run on MuJoCo's batch, randomized in tensors: train, export, evaluate, each record consistent."
    d = tmp_path/'hopper'
    r = ppo_trt('train', '--fast', '--env-id', 'Hopper-v4', '--timesteps', 8192, '--randomize', 'noise,delay=0:2',
                '--env-threads', 1, '--run-dir', d)
    assert r.returncode == 0, r.stderr[-2000:]
    rec = load_json(d/'train.json')
    assert rec['env_backend'].startswith('mujoco.batch') and '(1 thread)' in rec['env_backend']
    assert rec['randomize'] == {'noise': [0.0, 0.1], 'delay': [0, 2]} and rec['timesteps'] == 8192
    assert rec['final_eval_seed'] == 1_000_000 and rec['keep'] == 'last' and rec['deployable']
    assert 'held-out episodes' in r.stdout
    assert ppo_trt('export', '--run-dir', d).returncode == 0
    assert load_json(d/'export.json')['metadata']['randomize'] == rec['randomize']
    r = ppo_trt('evaluate', '--run-dir', d, '--backends', 'ort', '--phases', 'nominal,delay', '--episodes', 2)
    assert r.returncode == 0, r.stderr[-2000:]
    ev = load_json(d/'evaluate.json')
    assert [p['phase'] for p in ev['phases']] == ['nominal', 'delay']


@pytest.mark.parametrize('args, needle', [
    (['--env-id', 'Swimmer-v9'], "unknown environment id 'Swimmer-v9'"),
    (['--env-id', 'CartPole-v1', '--randomize', 'friction'], 'not friction'),
    (['--env-id', 'Hopper-v4', '--randomize', 'delay=0:11'], 'out of bounds'),
    (['--env-id', 'Hopper-v4', '--device', 'cuda:0'], 'cuda')])
def test_fast_mujoco_bad_input(tmp_path, args, needle):
    r = ppo_trt('train', '--fast', *args, '--run-dir', tmp_path/'r')
    err = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(err) == 1 and needle in err[0], r.stderr[-2000:]
    assert not (tmp_path/'r').exists()


@pytest.mark.parametrize('args, env, torch_threads, env_threads, why', [
    pytest.param([], {}, None, None, 'one: its largest tensors', marks=pytest.mark.slow),
    (['--env-threads', '1'], {'OMP_NUM_THREADS': '2'}, 2, 1, 'given (OMP_NUM_THREADS=2)'),
    pytest.param(['--torch-threads', '3', '--env-threads', '1'], {'OMP_NUM_THREADS': '2'}, 3, 1,
                 'given (--torch-threads)', marks=pytest.mark.slow)])
@pytest.mark.slow  # over 5 s: the quick suite keeps the README test command under 10 minutes
def test_thread_plan_applied_and_recorded(tmp_path, args, env, torch_threads, env_threads, why):
    "The trainer's threads come from the plan (explicit settings win) and train.json says which and why."
    import os, subprocess, shutil
    d = tmp_path/'h'
    r = subprocess.run([shutil.which('ppo-trt'), 'train', '--fast', '--env-id', 'Hopper-v4', '--timesteps', '4096',
                        '--run-dir', str(d), *args], capture_output=True, text=True,
                       env={**{k: v for k, v in os.environ.items() if k not in ('OMP_NUM_THREADS', 'MKL_NUM_THREADS')},
                            'PYTHONWARNINGS': 'ignore', **env})
    assert r.returncode == 0, r.stderr[-2000:]
    rec = load_json(d/'train.json')
    plan = rec['thread_plan']
    expect = torch_threads or 1  # unset: one, since 256-row minibatches of 64 units are below torch's grain size
    assert (plan['torch_threads'], rec['torch_threads']) == (expect, expect)
    assert plan['why']['torch'].startswith(why) and 0 <= plan['busy'] <= plan['cpus']
    if env_threads:
        words = f'({env_threads} thread{"" if env_threads == 1 else "s"})'  # the plural agrees with the count
        assert plan['env_threads'] == env_threads and words in rec['env_backend']
    elif 'thread' in rec['env_backend']:  # the cores not busy when it started, at most one per env
        assert plan['env_threads'] == max(1, min(16, plan['cpus'] - plan['busy'])), plan
    assert 'thread(s)' in r.stdout and 'cores busy at start' in r.stdout
    # the profile: every phase of the call, summing to its wall time, and printed
    assert {'setup', 'policy', 'env step', 'bookkeeping', 'advantages', 'update', 'evaluation',
            'held-out evaluation', 'save'} == set(rec['profile']), rec['profile']
    assert abs(sum(rec['profile'].values()) - rec['call_wall_s']) < 0.05 and rec['call_wall_s'] >= rec['wall_s']
    # the two timings say what each covers: the training loop, then the whole call
    assert 's of training (' in r.stdout and f"{rec['call_wall_s']:.1f} s in all, with setup" in r.stdout
