"""`import ppo_trt` is the product's front door: it stays light (nothing heavy imported until used), it offers one name
per stage of the run folder and the names the README shows, and the README's Python example runs as written (on the
committed reference policy)."""
import json, re, shutil, subprocess, sys
from pathlib import Path
import numpy as np
import pytest
import ppo_trt

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT/'nbs'/'_reference'/'hopper'
HEAVY = ('torch', 'numpy', 'onnxruntime', 'mujoco', 'gymnasium', 'stable_baselines3', 'numba', 'onnx')
# name -> (module that defines it, its name there): what each public name must be
PUBLIC = dict(load=('ppo_trt.backends.registry', 'load'), available=('ppo_trt.backends.registry', 'available'),
              ControlLoop=('ppo_trt.measure.evaluate', 'ControlLoop'), train_policy=('ppo_trt.train.sb3', 'train'),
              export_onnx=('ppo_trt.export.deployment', 'export_run'), bench=('ppo_trt.measure.bench', 'bench'),
              BenchSettings=('ppo_trt.measure.bench', 'BenchSettings'),
              evaluate=('ppo_trt.measure.evaluate', 'evaluate'),
              export_c=('ppo_trt.export.c_library', 'write_c_library'))

def python(code):
    "stdout of `code` run by a fresh interpreter (nothing imported before it)."
    return subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout.strip()

def test_import_is_light():
    assert python(f'import sys, ppo_trt; print(sorted(m for m in {HEAVY!r} if m in sys.modules))') == '[]'

def test_cli_parser_imports_no_framework():
    "`ppo-trt --help` builds every subcommand's flags from the config classes without loading a framework."
    code = ('import sys, ppo_trt.cli as c; c.parser(); '
            "print(sorted(m for m in ('torch', 'onnx', 'onnxruntime', 'mujoco', 'stable_baselines3', 'numba', 'triton') "
            'if m in sys.modules))')
    assert python(code) == '[]'

def test_from_ppo_trt_import_each_name():
    names = ', '.join(PUBLIC)
    out = python(f'from ppo_trt import {names}; import ppo_trt.train.sb3, ppo_trt.export.deployment, ppo_trt; '
                 f'print(ppo_trt.train_policy is ppo_trt.train.sb3.train, type(ppo_trt.train).__name__, '
                 f'ppo_trt.export_onnx is ppo_trt.export.deployment.export_run, train_policy is ppo_trt.train_policy)')
    assert out == 'True module True True', out  # `train`/`export` stay the subpackages; their stages keep their names

def test_public_names():
    import importlib
    assert ppo_trt.__all__ == list(PUBLIC) and set(PUBLIC) <= set(dir(ppo_trt))
    for name, (module, attr) in PUBLIC.items():
        obj = getattr(ppo_trt, name)
        assert obj is getattr(importlib.import_module(module), attr), name
        assert obj.__doc__ and obj.__doc__.strip(), f'{name} has no docstring'
    with pytest.raises(AttributeError, match='no attribute'): ppo_trt.trian
    with pytest.raises(ImportError): exec('from ppo_trt import trian', {})

@pytest.mark.slow  # a training, an export, a bench and an evaluation: 5.6 s (the quick suite keeps tests under 4.5 s)
def test_the_stages_through_the_public_names(tmp_path):
    "train -> export -> bench -> evaluate -> export-c -> load, each through `ppo_trt.<name>`, on a tiny Hopper run."
    from ppo_trt.backends import registry
    from ppo_trt.core.records import load_artifact
    from ppo_trt.export.c_library import compiler_missing
    d = tmp_path/'run'
    rec = ppo_trt.train_policy(d, 'Hopper-v4', preset_name='smoke', timesteps=512, eval_freq=256, n_eval_episodes=1,
                               final_eval_episodes=1, progress=False)
    assert rec.timesteps >= 512 and (d/'policy.zip').is_file()
    exp = ppo_trt.export_onnx(d)
    assert (d/'policy.onnx').is_file() and exp.parity_ort_cpu.max_abs_err < 1e-4
    quick = ppo_trt.BenchSettings(warmup=10, iters=100, batches=(1, 16), sweep_seconds=0.02, closed_loop_steps=50)
    bf = ppo_trt.bench(d, ['ort'], quick, progress=False, print_table=False)
    assert bf == load_artifact(d, 'bench_record') and {r.backend for r in bf.records} == {'ort'}
    assert all(r.ran and not r.failed for r in bf.records), [r.reason for r in bf.records]
    ev = ppo_trt.evaluate(d, ['ort'], phases=['nominal'], episodes=1, progress=False, delay_steps=())
    assert [p.phase for p in ev.phases] == ['nominal'] and 'ort' in ev.backends
    assert json.loads((d/'evaluate.json').read_text())['backends'] == ev.backends
    obs = np.load(d/'export_obs.npy')[:32]
    runner, reference = ppo_trt.load('ort', d), registry.load('ort', d)
    np.testing.assert_array_equal(runner(obs), reference(obs))  # the registry's runner, by the public name
    if why := compiler_missing('cc'): pytest.skip(f'export_c needs a C compiler: {why}')
    lib = ppo_trt.export_c(d, tmp_path/'c_policy', 'cc')
    assert (tmp_path/'c_policy'/'ppo_policy.c').is_file() and lib['test']['cc'], lib['test']
    np.testing.assert_allclose(ppo_trt.load('native-c', d)(obs), runner(obs), atol=1e-5)

def test_the_readme_python_example_runs():
    readme = (ROOT/'README.md').read_text(encoding='utf-8')
    example = re.search(r'## In Python\n\n```python\n(.*?)```', readme, re.S).group(1)
    import gymnasium as gym
    env = gym.make('Hopper-v4'); obs, _ = env.reset(seed=0); env.close()
    scope = dict(obs=obs)
    exec(example.replace("'runs/Hopper-v4-ppo'", repr(str(REF))), scope)
    action, loop, runner = scope['action'], scope['loop'], scope['runner']
    assert action.shape == (3,) and np.isfinite(action).all() and loop.events == []  # the policy's own action
    np.testing.assert_allclose(action, runner(obs[None].astype(np.float32))[0], atol=1e-6)
    nan_action = loop.step(np.full_like(obs, np.nan))  # a sensor gone bad: the fallback acts, in the same step
    assert np.isfinite(nan_action).all() and [e.kind for e in loop.events] == ['bad-obs']
