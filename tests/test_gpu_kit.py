"""The GPU kit (tools/gpu_session.sh) and what it relies on, tried on any machine: bench goes on when mujoco cannot
load its GL, the stages say why GPU steps skip, and a stage stops at its time budget."""
import json, os, subprocess, sys
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
SESSION = ROOT/'tools'/'gpu_session.sh'


def _cuda():
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError: return False


def kit(stage, out, **env):
    "Run one stage of the kit with this Python as it is (no install); the CompletedProcess."
    e = {**os.environ, 'OUT': str(out), 'KIT_DIR': str(out/'kit'), 'PPO_TRT_PY': sys.executable,
         'KIT_INSTALL': 'none', **env}
    return subprocess.run(['bash', str(SESSION), stage], capture_output=True, text=True, env=e, timeout=300)


@pytest.fixture(scope='module')
def small_run(tmp_path_factory):
    "A Hopper-v4 policy trained for a few hundred steps and exported."
    from ppo_trt.train.sb3 import train
    from ppo_trt.export.onnx import export
    d = tmp_path_factory.mktemp('kit')/'run'
    train(d, preset_name='smoke', timesteps=512, eval_freq=512, n_eval_episodes=1, final_eval_episodes=1,
          progress=False)
    export(d)
    return d


@pytest.mark.parametrize('gl', ['bogus', 'osmesa'])
def test_bench_goes_on_when_mujoco_cannot_load_gl(small_run, gl):
    "A MUJOCO_GL the machine cannot serve fails `import mujoco`: only the closed loops are lost, with the reason."
    env = {**os.environ, 'MUJOCO_GL': gl, 'PYTHONWARNINGS': 'ignore'}
    code = 'import sys; from ppo_trt.cli import main; sys.exit(main())'
    r = subprocess.run([sys.executable, '-c', code, 'bench', '--run-dir', small_run, '--backends', 'ort',
                        '--batches', '1', '--iters', '50', '--warmup', '5', '--sweep-seconds', '0.01',
                        '--closed-loop-steps', '20'], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    recs = json.loads((small_run/'bench.json').read_text())['records']
    modes = {x['mode']: x for x in recs if x['backend'] == 'ort'}
    assert modes['latency']['ran'] and modes['sweep']['ran']
    loop = modes['closed-loop']
    assert not loop['ran'] and loop['failed'] and loop['reason'].startswith('closed-loop failed: '), loop


def test_session_without_a_stage_prints_its_usage(tmp_path):
    r = subprocess.run(['bash', str(SESSION)], capture_output=True, text=True, env={**os.environ, 'OUT': str(tmp_path)})
    assert r.returncode == 2 and 'smoke|bench|envs|ppo' in r.stderr
    assert 'gpu_session.sh smoke' in r.stdout and 'timeout_s=600' in r.stdout


@pytest.mark.skipif(_cuda(), reason='on a GPU machine the ppo stage runs for real (minutes)')
def test_ppo_stage_says_why_gpu_steps_skip(tmp_path):
    r = kit('ppo', tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert 'skipped:' in (tmp_path/'pytest_gpu.txt').read_text()
    log = (tmp_path/'kit_ppo.txt').read_text()
    assert 'no GPU: ' in log and 'fast PPO and pytest -m gpu skipped: ' in log


def test_a_stage_stops_its_steps_at_its_budget(tmp_path):
    "With 6 s for the stage, no step can get its 5 s minimum: none starts, and the logs say so."
    r = kit('smoke', tmp_path, KIT_STAGE_S='6', MUJOCO_GL='bogus')
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    doctor, log = (tmp_path/'doctor.txt').read_text(), (tmp_path/'kit_smoke.txt').read_text()
    assert 'MUJOCO_GL was bogus, now disable' in log, log
    for name in ('nvidia-smi', 'versions', 'doctor', 'cli-help', 'mujoco'):
        assert f"{name}: not run: the stage's 6 s are spent" in log
        assert f"== {name}: not run: the stage's time is spent" in doctor
