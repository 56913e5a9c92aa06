"""Bad input: one clear error naming the problem and the fix; nothing on disk lost."""
import numpy as np
import pytest
from conftest import ppo_trt
from ppo_trt.backends import registry as B
from ppo_trt.core.files import BadInputError, BadArtifactError, sha256_file

def _fails(r, *needles):
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-1500:])
    err = r.stderr.strip().splitlines()
    assert err and 'Traceback' not in r.stderr, r.stderr
    for n in needles: assert n in r.stderr, (n, r.stderr)

@pytest.mark.parametrize('obs, needle', [
    (np.zeros(11, np.float32), 'obs[None]'),
    (np.zeros((1, 12), np.float32), 'shape [B, 11]'),
    (np.zeros((1, 11), np.float64), 'float64'),
    (np.zeros((0, 11), np.float32), 'B >= 1'),
    (np.full((2, 11), np.nan, np.float32), 'NaN or inf'),
    (np.array([[np.inf] * 11], np.float32), 'NaN or inf'),
])
def test_runner_rejects_bad_obs(run_dir, obs, needle):
    for name in [n for n, (ok, _) in B.available().items() if ok]:
        with pytest.raises(BadInputError, match=None) as e: B.load(name, run_dir)(obs)
        assert needle in str(e.value), (name, str(e.value))

@pytest.mark.parametrize('damage', ['truncate', 'text'])
def test_corrupt_onnx(run_copy, damage):
    p = run_copy/'policy.onnx'
    p.write_bytes(p.read_bytes()[:300]) if damage == 'truncate' else p.write_text('not a model')
    bench_before = sha256_file(run_copy/'bench.json')
    _fails(ppo_trt('bench', '--run-dir', run_copy), 'policy.onnx does not match export.json', 'ppo-trt export')
    assert sha256_file(run_copy/'bench.json') == bench_before
    with pytest.raises(BadArtifactError): B.load('ort', run_copy)

@pytest.mark.parametrize('remove, stage, cmd',
                         [('policy.onnx', 'export', 'bench'), ('policy.zip', 'train', 'export'),
                          ('bench.json', 'bench', 'report'), ('export_obs.npy', 'export', 'bench')])
def test_missing_artifact_names_stage(run_copy, remove, stage, cmd):
    (run_copy/remove).unlink()
    _fails(ppo_trt(cmd, '--run-dir', run_copy), remove, f'ppo-trt {stage} --run-dir')

@pytest.mark.parametrize('n', ['0', '-5'])
def test_timesteps_must_be_positive(tmp_path, n):
    r = ppo_trt('run', '--run-dir', tmp_path/'r', '--timesteps', n)
    assert r.returncode == 2 and 'positive integer' in r.stderr
    assert not (tmp_path/'r').exists()

def test_unknown_env_id(tmp_path):
    _fails(ppo_trt('train', '--env-id', 'Hopper-v99', '--run-dir', tmp_path/'r'), 'unknown environment id', 'Hopper-v')
    assert not (tmp_path/'r').exists()

def test_unknown_backend_before_any_work(tmp_path):
    _fails(ppo_trt('run', '--run-dir', tmp_path/'r', '--backends', 'ort,trt-magic'), 'unknown backend', 'known: sb3')
    assert not (tmp_path/'r').exists()

def test_policy_for_another_env(run_copy):
    before = sha256_file(run_copy/'bench.json')
    _fails(ppo_trt('bench', '--run-dir', run_copy, '--env-id', 'Walker2d-v4'), 'exported for Hopper-v4', 'Walker2d-v4')
    _fails(ppo_trt('enjoy', '--run-dir', run_copy, '--env-id', 'Walker2d-v4', '--mode', 'benchmark'),
           'exported for Hopper-v4')
    assert sha256_file(run_copy/'bench.json') == before

def test_trained_run_not_overwritten(run_copy):
    before = sha256_file(run_copy/'policy.zip')
    _fails(ppo_trt('train', '--run-dir', run_copy, '--timesteps', 2048), '--resume', '--force')
    assert sha256_file(run_copy/'policy.zip') == before

def test_corrupt_json_record(run_copy):
    (run_copy/'bench.json').write_text('{"records": [')
    _fails(ppo_trt('report', '--run-dir', run_copy), 'not valid JSON')
