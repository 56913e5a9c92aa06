"""Safe at the limit: the checked call refuses what it cannot act on, nothing non-finite reaches the actuators, a
damaged cache never kills the process, one runner serves several threads, the hot path never reads out of bounds, and
policy.onnx alone deploys without reading a pickle."""
import json, os, shutil, subprocess, sys, textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
import numpy as np
import pytest
from ppo_trt.backends import registry as B
from ppo_trt.core.files import BadInputError
from ppo_trt.envs.controllers import pid_baseline, run_episode
from ppo_trt.measure.evaluate import ControlLoop, BACKEND_FAULTS
from ppo_trt.envs.gym import make_env

CPU = [n for n, (ok, _) in B.available().items() if ok and not B.backends()[n].gpu]
ONNX_CPU = [n for n in CPU if not B.backends()[n].runner.needs_run]


def test_the_cpu_backends_are_all_here():
    "Every built-in backend that needs no GPU runs on the test machine, so the tests below cover each one."
    builtin_cpu = {n for n, b in B.backends().items() if b.origin == 'built-in' and not b.gpu}
    assert len(builtin_cpu) >= 7 and builtin_cpu <= set(CPU), B.available()


@pytest.mark.parametrize('name', CPU)
def test_two_threads_one_runner_no_wrong_answers(run_dir, name):
    "2 threads, different 64 x 11 batches, 3 000 checked calls each: every answer is the one for that thread's batch."
    obs = np.load(run_dir/'export_obs.npy')
    runner = B.load(name, run_dir)
    batches = [np.ascontiguousarray(obs[:64]), np.ascontiguousarray(obs[64:128])]
    want = [runner(b) for b in batches]
    calls = 300 if name == 'sb3' else 3000  # sb3 predict is ~100x slower; the race it would show is the same
    def wrong(i): return sum(not np.array_equal(runner(batches[i]), want[i]) for _ in range(calls))
    with ThreadPoolExecutor(2) as pool: assert sum(pool.map(wrong, range(2))) == 0


class _FaultySensor:
    "An env whose observations at steps 3, 10, 17, ... hold NaN or inf."
    def __init__(self, env, bad): self.env, self.bad, self.t, self.sent, self.nonfinite_actions = env, bad, 0, 0, 0
    def reset(self, **kw):
        self.t = 0
        return self.env.reset(**kw)
    def step(self, action):
        self.sent += 1; self.nonfinite_actions += not np.isfinite(action).all()
        obs, r, term, trunc, info = self.env.step(action)
        self.t += 1
        if self.t % 7 == 3: obs = obs.copy(); obs[self.t % len(obs)] = self.bad
        return obs, r, term, trunc, info
    def __getattr__(self, k): return getattr(self.env, k)


@pytest.mark.parametrize('bad', [np.nan, np.inf, -np.inf])
@pytest.mark.parametrize('name', CPU)
def test_nonfinite_observation_never_reaches_the_actuators(run_dir, name, bad):
    loop = ControlLoop(B.load(name, run_dir), pid_baseline('Hopper-v4'), deadline_us=1e6, warmup=2)
    env = _FaultySensor(make_env('Hopper-v4'), bad)
    _, steps = run_episode(env, loop, seed=0)
    kinds = [e.kind for e in loop.events]
    assert env.nonfinite_actions == 0 and env.sent == steps
    assert (kinds.count('bad-obs') == sum(1 for t in range(1, steps) if t % 7 == 3)
            and not set(kinds) & set(BACKEND_FAULTS))


def test_loop_falls_back_in_the_same_step(run_dir):
    "The bad observation's step gets the fallback's action computed on the last good observation."
    runner, obs = B.load('native-c', run_dir), np.load(run_dir/'export_obs.npy')
    loop, ref = ControlLoop(runner, pid_baseline('Hopper-v4'), warmup=0), pid_baseline('Hopper-v4')
    np.testing.assert_array_equal(loop.step(obs[0]), runner(obs[:1])[0])
    ref.predict(obs[0])
    bad = obs[1].copy(); bad[4] = np.nan
    np.testing.assert_array_equal(loop.step(bad), ref.predict(obs[0])[0])
    assert [e.kind for e in loop.events] == ['bad-obs']
    first = ControlLoop(runner, pid_baseline('Hopper-v4'), warmup=0)
    np.testing.assert_array_equal(first.step(bad), np.zeros(3, np.float32))  # nothing good seen yet: actuators off
    assert [e.kind for e in first.events] == ['bad-obs', 'unsafe-fallback']


def _load_in_subprocess(onnx, cache):
    code = ("from ppo_trt.export.c_kernel import compile_c_policy; "
            f"print(compile_c_policy({str(onnx)!r}, None, {str(cache)!r}).cache)")
    return subprocess.run([sys.executable, '-c', code], capture_output=True, text=True)


@pytest.mark.slow  # over 9 s on a slow 2-core box: with the long checks (pytest -m slow tests)
@pytest.mark.parametrize('damage', ['truncate', 'random', 'swap', 'record'])
def test_damaged_c_cache_is_rebuilt_never_loaded(run_dir, tmp_path, damage):
    from ppo_trt.export.c_kernel import compile_c_policy
    cache = tmp_path/'cache'
    assert _load_in_subprocess(run_dir/'policy.onnx', cache).stdout.strip() == 'built'
    so = next(cache.glob('ppo_trt_policy_*.so'))
    if damage == 'truncate': so.write_bytes(so.read_bytes()[:4096])
    elif damage == 'random': so.write_bytes(np.random.default_rng(0).bytes(so.stat().st_size))
    elif damage == 'swap':  # a valid extension of another policy under this name
        other = tmp_path/'other'/'policy.onnx'; other.parent.mkdir()
        _toy_onnx(other)
        assert _load_in_subprocess(other, tmp_path/'other_cache').returncode == 0
        shutil.copy(next((tmp_path/'other_cache').glob('ppo_trt_policy_*.so')), so)
    else: so.with_suffix('').with_suffix('.json').write_text('{"so_sha256": "0000"}')
    r = _load_in_subprocess(run_dir/'policy.onnx', cache)
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])  # a signal would be a negative return code
    assert r.stdout.strip().startswith('rebuilt: '), r.stdout
    assert _load_in_subprocess(run_dir/'policy.onnx', cache).stdout.strip() == 'loaded from the cache (hash verified)'


def _toy_onnx(path):
    import onnx
    from onnx import helper, numpy_helper, TensorProto
    w = numpy_helper.from_array(np.ones((11, 3), np.float32), 'W')
    g = helper.make_graph([helper.make_node('MatMul', ['obs', 'W'], ['h']),
                           helper.make_node('Tanh', ['h'], ['action'])], 'g',
                          [helper.make_tensor_value_info('obs', TensorProto.FLOAT, ['B', 11])],
                          [helper.make_tensor_value_info('action', TensorProto.FLOAT, ['B', 3])], [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)], ir_version=9)
    for k, v in dict(env_id='Hopper-v4', obs_dim='11', act_dim='3').items():
        e = model.metadata_props.add(); e.key, e.value = k, v
    onnx.save(model, path)


def test_unwritable_cache_is_one_clear_error(run_dir, tmp_path):
    (tmp_path/'file').write_text('x')
    code = f"""
        import os; os.environ['PPO_TRT_CACHE'] = {str(tmp_path/'file')!r}
        from ppo_trt.backends import registry as B
        try: B.load('native-c', {str(run_dir)!r})
        except B.BackendUnavailable as e: print('refused:', e)
    """
    r = subprocess.run([sys.executable, '-c', textwrap.dedent(code)], capture_output=True, text=True)
    assert r.returncode == 0 and 'set PPO_TRT_CACHE to a writable folder' in r.stdout, r.stderr[-2000:]


@pytest.mark.slow  # over 9 s on a slow 2-core box: with the long checks (pytest -m slow tests)
def test_policy_onnx_alone_deploys_without_pickle(run_dir, tmp_path):
    "Only policy.onnx in the folder; an audit hook sees every unpickled class while the ONNX backends load and run."
    alone = tmp_path/'deploy'/'policy.onnx'; alone.parent.mkdir(); shutil.copy(run_dir/'policy.onnx', alone)
    code = f"""
        import json, sys
        import numpy as np
        from ppo_trt.backends import registry as B
        seen = []
        sys.addaudithook(lambda event, args: seen.append(args[:2]) if event == 'pickle.find_class' else None)
        obs = np.load({str(run_dir/'export_obs.npy')!r})
        out = {{n: B.load(n, {str(alone)!r})(obs).tolist() for n in {ONNX_CPU!r}}}
        print(json.dumps(dict(seen=[list(map(str, s)) for s in seen], out=out)))
    """
    r = subprocess.run([sys.executable, '-c', textwrap.dedent(code)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout.splitlines()[-1])
    assert res['seen'] == [], res['seen'][:10]
    assert sorted(os.listdir(alone.parent)) == ['policy.onnx']  # nothing written beside it
    ref = B.load('ort', run_dir)(np.load(run_dir/'export_obs.npy'))
    for n, out in res['out'].items(): assert np.abs(np.asarray(out) - ref).max() <= 1e-5, n


def test_run_folder_and_onnx_file_give_the_same_runner(run_dir):
    obs = np.load(run_dir/'export_obs.npy')
    for n in ONNX_CPU: np.testing.assert_array_equal(B.load(n, run_dir)(obs), B.load(n, run_dir/'policy.onnx')(obs))
    with pytest.raises(BadInputError, match='needs the run folder'): B.load('torch', run_dir/'policy.onnx')


def test_onnx_without_our_metadata_is_adopted(tmp_path):
    "An actor ONNX without ppo_trt's metadata (any trainer's) is adopted: its widths inferred, its actions unchanged."
    import onnx
    p = tmp_path/'policy.onnx'; _toy_onnx(p)
    m = onnx.load(p); del m.metadata_props[:]; onnx.save(m, p)
    r = B.load('ort', p)
    obs = np.linspace(-1, 1, 22, dtype=np.float32).reshape(2, 11)
    assert (r.obs_dim, r.act_dim) == (11, 3) and np.allclose(r(obs), np.tanh(obs.sum(1, keepdims=True)).repeat(3, 1))
    assert r.info.get('env_id') is None and sorted(os.listdir(tmp_path)) == ['policy.onnx']  # nothing beside it
