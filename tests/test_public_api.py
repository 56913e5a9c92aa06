"""`import ppo_trt` is the product's front door: it stays light (nothing heavy imported until used), it offers the names
the README shows, and the README's Python example runs as written (on the committed reference policy)."""
import re, subprocess, sys
from pathlib import Path
import numpy as np
import pytest
import ppo_trt

ROOT = Path(__file__).resolve().parents[1]
REF = ROOT/'nbs'/'_reference'/'hopper'

def test_import_is_light():
    code = 'import sys, ppo_trt; print(sorted(m for m in ("torch", "numpy", "onnxruntime") if m in sys.modules))'
    r = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == '[]', r.stdout

def test_public_names():
    from ppo_trt.measure.evaluate import ControlLoop
    from ppo_trt.backends.registry import load, available
    assert (ppo_trt.ControlLoop, ppo_trt.load, ppo_trt.available) == (ControlLoop, load, available)
    assert {'ControlLoop', 'load', 'available'} <= set(dir(ppo_trt))
    with pytest.raises(AttributeError, match='no attribute'): ppo_trt.trian

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
