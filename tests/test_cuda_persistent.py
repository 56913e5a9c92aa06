"""cuda-persistent on a machine without a GPU: its host protocol (the shared block as a numpy view, sequence numbers,
deadline, stop flag, finite checks in and out) against a thread standing in for the kernel, the generated CUDA source
(nothing from the ONNX file but numbers; nvcc compiles it, in the slow test), and the probe's reason. The real kernel's
parity is tests/test_gpu.py's, on a GPU."""
import re, shutil, subprocess, time
from pathlib import Path
import numpy as np
import onnx
import pytest
import actors
from ppo_trt.backends import registry as B
from ppo_trt.backends.cuda_persistent import (SimulatedPersistentRunner, SimulatedDevice, Mailbox, DeviceError,
                                              cuda_source, mailbox_dtype, SEQ_IN, SEQ_OUT, STOP, STATUS, READY,
                                              STOPPED, SEQ_MASK, KERNEL_NAME)
from ppo_trt.backends.onnxruntime import OrtRunner
from ppo_trt.core.files import BadInputError
from ppo_trt.export.onnx import load_onnx
from ppo_trt.export.onnx_graph import parse_chain, NativeUnsupportedError

HOPPER = Path(__file__).parents[1]/'nbs'/'_reference'/'hopper'/'policy.onnx'


def close_to(got, want):
    "Within the float32 bound scaled to the actions' size (real actors output raw actions of magnitude 10-60)."
    err = np.abs(np.asarray(got, np.float64) - want).max()
    assert err <= 1e-5 * max(1.0, float(np.abs(want).max())), err


@pytest.fixture(scope='module')
def hopper(tmp_path_factory):
    p = tmp_path_factory.mktemp('hopper')/'policy.onnx'
    shutil.copy(HOPPER, p)
    obs = np.random.default_rng(0).normal(size=(64, 11)).astype(np.float32)
    return p, obs, OrtRunner(p)(obs)


@pytest.fixture
def sim(hopper):
    r = SimulatedPersistentRunner(hopper[0])
    yield r
    r.close()


def test_simulated_device_matches_ort_one_row_at_a_time_and_batched(sim, hopper):
    _, obs, want = hopper
    close_to(np.concatenate([sim(o[None]) for o in obs]), want)
    close_to(sim(obs), want)
    assert sim.box.seq == 2 * len(obs) and sim.info['backend'] == 'cuda-persistent (simulated)'


@pytest.mark.slow  # torch exports the actor and gcc builds native-c's kernel for it: seconds
def test_scaled_actions_of_a_foreign_actor(tmp_path):
    p = actors.with_metadata(actors.feedforward('cleanrl-tanh'), tmp_path/'policy.onnx')
    obs = np.random.default_rng(1).normal(size=(16, 17)).astype(np.float32)
    r = SimulatedPersistentRunner(p)
    try: close_to(r(obs), OrtRunner(p)(obs))
    finally: r.close()


def test_sequence_numbers_wrap_around(hopper):
    p, obs, want = hopper
    r = SimulatedPersistentRunner(p, start_seq=SEQ_MASK - 2)
    try:
        close_to(np.concatenate([r(o[None]) for o in obs[:8]]), want[:8])
        assert r.box.seq == 5 and int(r.box.ctl[SEQ_OUT]) == 5 and int(r.box.fields['seq_in']) == 5
    finally: r.close()


def test_a_stalled_device_is_a_clear_error_at_the_deadline_not_a_hang(sim, hopper):
    obs = hopper[1]
    sim(obs[:1])
    sim.dev.stall(); sim.timeout_s = 0.05
    t0 = time.perf_counter()
    with pytest.raises(DeviceError, match=r'did not answer request 2 within 50 ms \(its loop runs; its last answer '
                                          r'was 1\): the GPU is stalled or busy; close this runner'):
        sim(obs[:1])
    assert 0.05 <= time.perf_counter() - t0 < 1.0
    sim.dev.stall(False); sim.timeout_s = 5.0
    close_to(sim(obs[1:2]), hopper[2][1:2])  # the next request is answered with its own row


def test_the_stop_flag_ends_the_device_loop(sim, hopper):
    dev = sim.dev
    sim.dev.stall()  # even a device that no longer answers obeys the stop flag
    sim.close()
    assert not dev.alive and int(sim.box.ctl[STATUS]) == STOPPED and int(sim.box.ctl[STOP]) == 1
    sim.close()  # twice is fine
    with pytest.raises(DeviceError, match='closed'): sim(hopper[1][:1])


def test_a_bare_mailbox_and_device_stop_and_say_so():
    box = Mailbox(bytearray(mailbox_dtype(3, 2).itemsize), 3, 2, idle=lambda: time.sleep(0))
    dev = SimulatedDevice(box, lambda o, a: np.copyto(a, o[:, :2] * 2))
    assert box.ask(np.array([[1, 2, 3]], np.float32), 5.0).tolist() == [[2, 4]]
    assert box.stop(5.0) and dev.join(5.0) and box.said() == 'its loop has stopped'


def test_a_device_that_does_not_start_is_an_error_and_is_stopped_when_it_does(hopper):
    "A loop that has not said READY by the deadline: one clear error, and the stop flag waits for it."
    from ppo_trt.backends.cuda_persistent import PersistentRunner, _ThreadDevice
    class Late(_ThreadDevice):
        def _loop(self): time.sleep(0.3); super()._loop()
    box = Mailbox(bytearray(mailbox_dtype(11, 3).itemsize), 11, 3, idle=lambda: time.sleep(0))
    r, dev = PersistentRunner.__new__(PersistentRunner), Late(box, lambda o, a: a.fill(0))
    with pytest.raises(DeviceError, match=r'did not start within 0.05 s \(it has not started\)'):
        r._start(box, dev, 0.05)
    assert dev.join(5.0) and box.said() == 'its loop has stopped' and int(box.ctl[SEQ_OUT]) == 0
    r.close()  # never opened: nothing to do


def test_nan_in_is_refused_before_the_device_sees_it(sim):
    seq = sim.box.seq
    with pytest.raises(BadInputError, match='NaN or inf'): sim(np.full((1, 11), np.nan, np.float32))
    assert sim.box.seq == seq


def test_nan_out_of_the_device_is_refused_by_the_checked_call(hopper):
    r = SimulatedPersistentRunner(hopper[0], forward=lambda o, a: a.fill(np.nan))
    try:
        with pytest.raises(DeviceError, match=r'answered NaN or inf for rows \[0\] of finite observations'):
            r(hopper[1][:1])
        assert np.isnan(r.run(hopper[1][:1])).all()  # the unchecked path passes it on
    finally: r.close()


def test_reset_checks_the_loop_and_the_hot_path_checks_shapes(sim, hopper):
    sim.reset()
    close_to(sim(hopper[1][:1]), hopper[2][:1])
    with pytest.raises(ValueError, match=r'\[B, 11\]'): sim.run(np.zeros((1, 12), np.float32))
    sim.box.stop(5.0)
    with pytest.raises(DeviceError, match='not running'): sim.reset()


GENERATED = re.compile(r'[A-Za-z_][A-Za-z_0-9]*')
NORM_NAMES = {'nrm', 'sqrtf', 'normalise', 'm', 'q', 'd'}  # a LayerNorm's (the Hopper policy has none)


def source_of(model, **kw):
    return cuda_source(*parse_chain(model), **kw)


def names_in(text):
    "The identifiers of a source (numbers and their suffixes left out), the constant arrays K0, K1, ... as one."
    return {re.sub(r'^K\d+$', 'K', w) for w in GENERATED.findall(re.sub(r'\b\d[\w.+-]*', ' ', text))}


def test_no_name_from_the_onnx_file_reaches_the_cuda_source():
    model = load_onnx(HOPPER)
    plain = source_of(model)
    for k, n in enumerate(model.graph.node): n.name = f'*/ #include "x{k}" /* ppo_evil_{k}'
    assert source_of(model).text == plain.text
    text = source_of(actors.layernorm_opset18()).text
    assert text.isascii() and 'memcpy' not in plain.text and '#include' not in plain.text
    assert f'extern "C" __global__ void {KERNEL_NAME}(unsigned char *box)' in text
    assert names_in(text) - names_in(plain.text) == NORM_NAMES


def test_weights_go_to_shared_memory_when_they_fit():
    small = source_of(load_onnx(HOPPER))
    assert small.weights_shared and small.smem == 4 * 5123 and small.threads == 64
    wide = source_of(load_onnx(HOPPER), smem_max=16 << 10)  # 20 KB of weights over the limit: read from global memory
    assert not wide.weights_shared and wide.smem == 0
    assert 'const float *W = KW;' in wide.text and 'sw[i]' not in wide.text


def test_a_recurrent_policy_is_refused_with_where_it_runs():
    with pytest.raises(NativeUnsupportedError, match='recurrent one runs on triton or ort'):
        source_of(actors.gru_onnx())


def test_the_probe_says_why_it_cannot_run_here(hopper):
    b = B.backends()['cuda-persistent']
    ok, why = b.probe()  # this backend's probe alone (available() imports every backend's framework)
    if ok: pytest.skip('this machine has cuda-python, a driver and a GPU')
    assert why.startswith(('cuda-python does not import', 'no CUDA driver', 'the CUDA driver sees no GPU', 'NVRTC'))
    with pytest.raises(B.BackendUnavailable, match='backend cuda-persistent cannot run here: '):
        B.load('cuda-persistent', hopper[0])
    assert b.gpu and b.family == 'cuda_persistent' and 'pip install "ppo-trt[gpu]"' in b.hint


@pytest.mark.slow  # nvcc takes seconds a source
@pytest.mark.skipif(shutil.which('nvcc') is None, reason='needs nvcc (the CUDA toolkit) to compile the source')
@pytest.mark.parametrize('name', ['hopper', 'layernorm', 'cleanrl-tanh', 'every-activation-legacy', 'isaac-elu'])
def test_nvcc_compiles_the_generated_source(tmp_path, name):
    model = dict(hopper=lambda: load_onnx(HOPPER), layernorm=actors.layernorm_opset18).get(name)
    src = source_of(model() if model else actors.feedforward(name))  # isaac-elu: 190 000 weights, global memory
    (tmp_path/'k.cu').write_text(src.text)
    r = subprocess.run(['nvcc', '-c', '-arch=sm_90', '-std=c++17', 'k.cu', '-o', 'k.o'], cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    assert 'error' not in r.stderr.lower(), r.stderr[-3000:]


def _nvrtc():
    "True when cuda-python's NVRTC compiles here (no GPU needed: it makes a cubin for any architecture)."
    try:
        from cuda.bindings import nvrtc
        return int(nvrtc.nvrtcVersion()[0]) == 0
    except Exception: return False


@pytest.mark.slow  # NVRTC takes about a second a source
@pytest.mark.skipif(not _nvrtc(), reason='needs cuda-python and NVRTC (pip install cuda-python nvidia-cuda-nvrtc)')
def test_nvrtc_compiles_a_cubin_that_the_cache_hands_back_only_after_its_hash_checks_out(tmp_path):
    from ppo_trt.backends.cuda_persistent import obtain_cubin
    src = source_of(load_onnx(HOPPER))
    blob, how = obtain_cubin(src, 'sm_90', tmp_path)
    assert blob[:4] == b'\x7fELF' and how == 'compiled with NVRTC'
    assert obtain_cubin(src, 'sm_90', tmp_path) == (blob, 'loaded from the cache (hash verified)')
    cubin = next(tmp_path.glob('*.cubin'))
    cubin.write_bytes(blob[:-8] + b'\0' * 8)  # damaged on disk: compiled again, never loaded
    again, how = obtain_cubin(src, 'sm_90', tmp_path)
    assert again == blob and how.startswith('recompiled: the cached binary does not match the hash')
    bad = type(src)(src.text.replace('fmaf(', 'fmaff('), src.threads, src.smem, src.weights_shared, 11, 3)
    with pytest.raises(DeviceError, match=r'NVRTC could not compile the generated kernel: .*error: identifier "fmaff"'):
        obtain_cubin(bad, 'sm_90', tmp_path)
