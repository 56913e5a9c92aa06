"""Hardware in the loop (measure.hil, `ppo-trt c-loop --target`): Hopper in C on the host, the policy on an emulated
Cortex-M4F (QEMU mps2-an386) or aarch64 (qemu-aarch64) over a framed, checksummed serial link; the device answers
Python's frames, a corrupted frame times out into the fallback, a NaN observation is refused on the device, and the
episodes match native-c's. Skipped, with the package to install, where MuJoCo's C API, a cross toolchain or QEMU is
missing; the full CLI episodes are `slow`."""
import subprocess
from pathlib import Path
import numpy as np
import onnx
import pytest
from conftest import ppo_trt
from ppo_trt.core.files import BadInputError
from ppo_trt.core.records import read_record
from ppo_trt.export.onnx import ort_cpu_session
from ppo_trt.measure.hil import (hil_missing, hil_sources, build_hil, device, ask, encode_frame, fallback_run,
                                 LINK_TIMEOUT_STATUS)

M4, A64 = hil_missing('cortex-m4f'), hil_missing('aarch64')
needs_m4 = pytest.mark.skipif(bool(M4), reason=M4 or 'the M4 device can be emulated here')
needs_a64 = pytest.mark.skipif(bool(A64), reason=A64 or 'the aarch64 device can be emulated here')

@pytest.fixture(scope='module')
def m4_built(run_dir, tmp_path_factory):
    "The HIL build of the session run's policy for the Cortex-M4F, outside the run folder."
    return build_hil(run_dir, 'cortex-m4f', tmp_path_factory.mktemp('hil')/'m4')['path']

def _ort(run_dir, x):
    return ort_cpu_session(Path(run_dir)/'policy.onnx').run(['action'], {'obs': x[None]})[0][0]

@needs_m4
def test_the_device_answers_the_frames_python_builds(m4_built, run_dir):
    x = np.random.default_rng(3).normal(size=11).astype(np.float32)
    bad = bytearray(encode_frame('O', 2, x.tobytes())); bad[8] ^= 0x01  # a bit of the payload, after the checksum
    short = encode_frame('O', 3, x[:5].tobytes())  # a good frame of the wrong length
    with device(m4_built, 'cortex-m4f') as sock:
        got = ask(sock, encode_frame('K', 0) + bytes(bad) + short + encode_frame('O', 4, x.tobytes()), answers=3)
    assert [(k, s) for k, s, _ in got] == [('K', 0), ('A', 3), ('A', 4)]  # nothing for the corrupted frame
    assert got[0][2] == b'portable C' and got[1][2][0] == 1  # PPO_POLICY_BAD_ARGUMENT for the short observation
    status, act = got[2][2][0], np.frombuffer(got[2][2][1:], np.float32)
    assert status == 0 and np.abs(act - _ort(run_dir, x)).max() <= 1e-5

@needs_m4
def test_a_corrupted_frame_times_out_into_the_fallback(m4_built):
    fb = fallback_run(m4_built, 'cortex-m4f', step=5, how='corrupt')
    assert fb == dict(step=5, status=LINK_TIMEOUT_STATUS, next_status=0, fallbacks=1, timeouts=1, action_held=True,
                      gym_check=True, passed=True)

@needs_m4
def test_a_nan_observation_is_refused_on_the_device(m4_built):
    fb = fallback_run(m4_built, 'cortex-m4f', step=0, how='nan')
    assert fb == dict(step=0, status=2, next_status=0, fallbacks=1, timeouts=0, action_held=True, gym_check=True,
                      passed=True)  # at step 0 the held action is zeros

def test_a_history_policy_is_refused(run_dir, tmp_path):
    m = onnx.load(Path(run_dir)/'policy.onnx')
    onnx.helper.set_model_props(m, {**{p.key: p.value for p in m.metadata_props}, 'history_actions': '2'})
    onnx.save(m, tmp_path/'policy.onnx')
    with pytest.raises(BadInputError, match='reads its past actions'): hil_sources(tmp_path/'policy.onnx', 'cortex-m4f')

def _host_fma():
    r = subprocess.run(['cc', '-march=native', '-dM', '-E', '-x', 'c', '/dev/null'], capture_output=True, text=True)
    return '#define __FMA__ 1' in r.stdout

@pytest.mark.slow
@pytest.mark.parametrize('target', [pytest.param('cortex-m4f', marks=needs_m4), pytest.param('aarch64', marks=needs_a64)])
def test_c_loop_target_cli(run_copy, target):
    r = ppo_trt('c-loop', '--run-dir', run_copy, '--target', target, '--episodes', 2)
    assert r.returncode == 0 and 'Traceback' not in r.stderr, r.stdout[-3000:] + r.stderr[-3000:]
    assert 'check against native-c: PASS' in r.stdout and 'FAIL' not in r.stdout
    rec = read_record(run_copy/f'c_loop_{target}.json')
    assert rec.passed and rec.check.passed and len(rec.returns) == len(rec.native_returns) == 2
    assert rec.link_stats['timeouts'] == 0 and rec.link_stats['answers'] == sum(rec.episode_steps)
    assert rec.max_action_diff <= 1e-5 and rec.corrupted_frame['passed'] and rec.nan_observation['passed']
    if target == 'aarch64' and _host_fma():  # NEON rounds as native-c's FMA kernels: the same episodes, to the bit
        assert rec.kernel == 'neon' and rec.equal_to_the_bit and rec.returns == rec.native_returns
