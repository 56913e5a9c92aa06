"""Hardware in the loop (measure.hil, `ppo-trt c-loop --target`): Hopper in C on the host, the policy on an emulated
Cortex-M4F (QEMU mps2-an386) or aarch64 (qemu-aarch64) over a framed, checksummed serial link; the device answers
Python's frames, a corrupted frame times out into the fallback, a NaN observation is refused on the device, and the
episodes match native-c's. Skipped, with the package to install, where MuJoCo's C API, a cross toolchain or QEMU is
missing; the full CLI episodes are `slow`."""
import json, os, subprocess
from pathlib import Path
import numpy as np
import onnx
import pytest
from conftest import ppo_trt
from ppo_trt.core.files import BadInputError
from ppo_trt.core.records import read_record
from ppo_trt.export.onnx import ort_cpu_session
from ppo_trt.measure.hil import (hil_missing, hil_sources, build_hil, device, ask, encode_frame, fallback_run,
                                 hil_commands, LINK_TIMEOUT_STATUS)
from ppo_trt.measure.c_loop import c_loop_missing, LOOP_CFLAGS

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


# ---- issue 44: the host keeps the library's contract over a device that lies or goes away ---------------------------
# A fake device in Python, over the same socket protocol: no emulator, only gcc (and MuJoCo's C API for the loop).
REFERENCE = Path(__file__).parents[1]/'nbs'/'_reference'/'hopper'
needs_gcc = pytest.mark.skipif(bool(c_loop_missing('gcc')) or not REFERENCE.is_dir(),
                               reason=c_loop_missing('gcc') or 'the reference run is in a clone (nbs/_reference)')
LINK_DOWN = 17  # PPO_LINK_DOWN (ppo_link.h)
ACT_MAIN = r'''#include <stdio.h>
#include <stdlib.h>
#include "ppo_policy.h"
int main(int argc, char **argv) {  /* argv[1] calls of ppo_policy_act, `act` preset to 42 + i: status and act each */
    float obs[PPO_POLICY_OBS_DIM] = {0}, act[PPO_POLICY_ACT_DIM];
    int i, k, n = atoi(argv[argc - 1]);
    for (k = 0; k < n; k++) {
        int s;
        for (i = 0; i < PPO_POLICY_ACT_DIM; i++) act[i] = 42.0f + (float)i;
        s = ppo_policy_act(obs, act);
        printf("%d", s);
        for (i = 0; i < PPO_POLICY_ACT_DIM; i++) printf(" %.9g", act[i]);
        printf("\n");
    }
    return 0;
}
'''


def _read_frame(conn):
    "One frame the host sent (type, sequence), or None when the host closed the link."
    head = b''
    while len(head) < 5:
        chunk = conn.recv(5 - len(head))
        if not chunk: return None
        head += chunk
    rest = b''
    while len(rest) < head[4] + 2:
        chunk = conn.recv(head[4] + 2 - len(rest))
        if not chunk: return None
        rest += chunk
    return chr(head[2]), head[3]


class FakeDevice:
    "A device on a Unix socket that answers the host's 'O' frames from `answers` ((status, action) each) then closes."
    def __init__(self, folder, answers, close_after_reading=False):
        import socket, threading
        self.path, self.answers, self.close_after_reading = str(Path(folder)/'link.sock'), answers, close_after_reading
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); self.srv.bind(self.path); self.srv.listen(1)
        self.thread = threading.Thread(target=self.serve, daemon=True); self.thread.start()

    def serve(self):
        from ppo_trt.measure.hil import encode_frame
        conn, _ = self.srv.accept()
        with conn:
            for status, action in self.answers:
                kind, seq = _read_frame(conn)
                assert kind == 'O'
                conn.sendall(encode_frame('A', seq, bytes([status]) + np.asarray(action, np.float32).tobytes()))
            if self.close_after_reading: _read_frame(conn)  # one more call's frame, never answered
        self.srv.close()


@pytest.fixture(scope='module')
def host_sources(tmp_path_factory):
    "The HIL host's sources for the reference policy (3 actions), with a small main calling ppo_policy_act."
    d = tmp_path_factory.mktemp('host')
    for name, text in hil_sources(REFERENCE/'policy.onnx', 'aarch64').items(): (d/name).write_text(text)
    (d/'act_main.c').write_text(ACT_MAIN)
    r = subprocess.run(['gcc', *LOOP_CFLAGS, '-I.', 'act_main.c', 'ppo_link_host.c', '-o', 'act_main'], cwd=d,
                       capture_output=True, text=True)
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr  # strict C99, no warning
    return d


def _act_calls(folder, device_answers, calls, close_after_reading=False):
    "Run act_main for `calls` calls against a fake device: (return code, [(status, act)], stderr, link stats)."
    dev = FakeDevice(folder, device_answers, close_after_reading)
    env = {**os.environ, 'PPO_LINK': dev.path, 'PPO_LINK_TIMEOUT_MS': '5000', 'PPO_LINK_STATS': str(folder/'link.json')}
    try: r = subprocess.run([str(folder/'act_main'), str(calls)], capture_output=True, text=True, env=env, timeout=60)
    finally: dev.thread.join(10); os.unlink(dev.path)
    rows = [(int(line.split()[0]), [float(v) for v in line.split()[1:]]) for line in r.stdout.splitlines()]
    return r.returncode, rows, r.stderr, json.loads((folder/'link.json').read_text())


@needs_gcc
def test_a_nonfinite_answer_is_a_status_with_act_untouched(host_sources):
    "A device frame with status 0 and NaN / +inf / -inf: PPO_POLICY_NONFINITE_ACTION, `act` as the caller left it."
    rc, rows, err, stats = _act_calls(host_sources, [(0, [0.25, -0.5, 1]), (0, [np.nan, 0, 0]), (0, [0, np.inf, 0]),
                                                     (0, [0, 0, -np.inf]), (2, [0, 0, 0]), (0, [1, 2, 3])], 6)
    assert rc == 0, (rc, err)
    untouched = [42.0, 43.0, 44.0]
    assert rows == [(0, [0.25, -0.5, 1.0]), (3, untouched), (3, untouched), (3, untouched), (2, untouched),
                    (0, [1.0, 2.0, 3.0])]
    assert stats['answers'] == 6


@needs_gcc
@pytest.mark.parametrize('close_after_reading', [False, True], ids=['before-the-call', 'during-the-call'])
def test_a_closed_link_is_a_status_not_a_signal(host_sources, close_after_reading):
    "The device closes the link: every later call returns PPO_LINK_DOWN, `act` untouched; the process exits 0."
    rc, rows, err, stats = _act_calls(host_sources, [(0, [0.25, -0.5, 1])], 5, close_after_reading)
    assert rc == 0, (rc, err)  # not -13 (SIGPIPE) nor 3 (exit)
    assert rows == [(0, [0.25, -0.5, 1.0])] + [(LINK_DOWN, [42.0, 43.0, 44.0])] * 4
    assert err.count('the loop\'s fallback acts from now on') == 1 and stats['calls'] == 5


@needs_gcc
@pytest.mark.slow  # the host retries its connection for 10 s (an emulator may still be starting)
def test_no_device_at_all_is_a_status(host_sources, tmp_path):
    env = {**os.environ, 'PPO_LINK': str(tmp_path/'nobody.sock'), 'PPO_LINK_STATS': str(tmp_path/'link.json')}
    r = subprocess.run([str(host_sources/'act_main'), '2'], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0 and r.stdout.split('\n')[:2] == [f'{LINK_DOWN} 42 43 44'] * 2, (r.returncode, r.stderr)


@needs_gcc
@pytest.mark.slow  # builds the C loop against MuJoCo (~3 s)
def test_the_c_loop_falls_back_when_the_device_lies_then_goes_away(host_sources, tmp_path):
    "c_loop_link over a device that answers NaN at call 2 then closes after call 4: the loop holds, ends, exits 0."
    from ppo_trt.measure.c_loop import mujoco_c_api, LoopRun, read_trace
    inc, lib = mujoco_c_api()
    cmd = hil_commands('aarch64', 'gcc', inc, lib)[0]
    r = subprocess.run(cmd, cwd=host_sources, capture_output=True, text=True)
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr
    answers = [(0, [0.1, -0.1, 0.2]), (0, [0.2, 0.0, -0.2]), (0, [np.nan, 0, 0]), (0, [0.3, 0.3, 0.3])]
    dev = FakeDevice(tmp_path, answers, close_after_reading=True)
    env = {**os.environ, 'PPO_LINK': dev.path, 'PPO_LINK_TIMEOUT_MS': '5000', 'PPO_LINK_STATS': str(tmp_path/'s.json')}
    loop = LoopRun(0, episodes=0, steps=10, trace=tmp_path/'t.bin')
    try: r = subprocess.run(loop.command(host_sources/'c_loop_link'), capture_output=True, text=True, env=env, timeout=60)
    finally: dev.thread.join(10)
    assert r.returncode == 0, (r.returncode, r.stderr)
    out, tr = json.loads(r.stdout), read_trace(tmp_path/'t.bin')
    steps = np.flatnonzero(tr['t'] > 0)
    assert tr['status'][steps].astype(int).tolist() == [0, 0, 3, 0] + [LINK_DOWN] * 6
    act = tr['action'][steps]
    assert np.array_equal(act[2], act[1]) and (act[4:] == act[3]).all()  # the fallback held the last action
    assert out['fallbacks'] == 7 and out['nonfinite_action'] == 1 and np.isfinite(act).all()
