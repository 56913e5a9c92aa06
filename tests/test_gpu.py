"""GPU-only tests (`pytest -m gpu` on the GPU machine): every GPU backend's parity and timings, the Triton kernels
compiled, no host synchronisation in the device rollout, fast PPO with CUDA graphs.
Skipped where torch sees no CUDA GPU."""
import os, shutil
from pathlib import Path
import numpy as np
import pytest
import torch
from conftest import ppo_trt
from ppo_trt.backends import registry as B
from ppo_trt.core.files import load_json, BadInputError

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason='needs a CUDA GPU')]
GPU_BACKENDS = ('torch-cuda', 'torch-cuda-graph', 'torch-compile', 'ort-cuda', 'ort-trt', 'trt', 'trt-rtx', 'triton',
                'triton-tf32', 'cuda-persistent')
BOUND = dict(fp32=1e-5, tf32=5e-3, fp16=2e-2)  # max abs action error vs ORT FP32 (actions are in [-1, 1])


@pytest.fixture
def gpu_run(request, tmp_path):
    """A copy of $PPO_TRT_RUN_DIR (a finished run folder carried to the GPU machine, see tools/gpu_prepare.sh), else of
    the end-to-end run."""
    src = os.environ.get('PPO_TRT_RUN_DIR')
    shutil.copytree(Path(src) if src else request.getfixturevalue('run_dir'), tmp_path/'run')
    return tmp_path/'run'


@pytest.mark.parametrize('name', GPU_BACKENDS)
def test_gpu_backend_parity_and_kernel_time(gpu_run, name):
    ok, why = B.available()[name]
    if not ok: pytest.skip(f'{name} cannot run on this GPU machine: {why}')
    obs = np.load(gpu_run/'export_obs.npy')
    ref = B.load('ort', gpu_run)(obs)
    r = B.load(name, gpu_run)
    try:  # a resident kernel left running would hold every later device-wide synchronisation
        one = np.concatenate([r(obs[i:i + 1]) for i in range(64)])
        err = max(np.abs(r(obs) - ref).max(), np.abs(one - ref[:64]).max())
        assert err <= BOUND[r.precision], (name, r.precision, err)
        if hasattr(r, 'kernel_us'):
            k = r.kernel_us(1, 50)
            assert len(k) == 50 and (k > 0).all()
    finally: r.close()


def test_persistent_kernels_one_per_stream_answer_and_stop(gpu_run):
    "Two resident kernels at once (one stream each) answer their own callers; close ends each kernel, none hangs."
    ok, why = B.available()['cuda-persistent']
    if not ok: pytest.skip(f'cuda-persistent cannot run on this GPU machine: {why}')
    from ppo_trt.backends.cuda_persistent import DeviceError
    obs = np.load(gpu_run/'export_obs.npy')[:32]
    ref = B.load('ort', gpu_run)(obs)
    a, b = B.load('cuda-persistent', gpu_run), B.load('cuda-persistent', gpu_run)
    try:
        for r in (a, b, a):
            assert np.abs(np.concatenate([r(o[None]) for o in obs]) - ref).max() <= BOUND['fp32']
        with pytest.raises(BadInputError, match='NaN or inf'): a(np.full((1, obs.shape[1]), np.nan, np.float32))
    finally:
        for r in (a, b): r.close()
    assert not a.dev.alive and not b.dev.alive and a.box.said() == 'its loop has stopped'
    with pytest.raises(DeviceError, match='closed'): a(obs[:1])


def test_bench_records_kernel_only(gpu_run):
    names = [n for n in ('torch-cuda-graph', 'triton') if B.available()[n][0]]
    r = ppo_trt('bench', '--run-dir', gpu_run, '--backends', ','.join(names), '--iters', 200, '--warmup', 20,
                '--batches', '1,4096', '--closed-loop-steps', 0)
    assert r.returncode == 0, r.stderr[-2000:]
    recs = [x for x in load_json(gpu_run/'bench.json')['records'] if x['ran']]
    assert {x['backend'] for x in recs} == set(names)
    for x in recs:
        assert x['device'] == 'cuda' and 'kernel_only' in x and x['kernel_only']['p50_us'] > 0
        if x['mode'] == 'sweep': assert x['kernel_throughput_per_s'] > 0


def test_triton_cartpole_compiled_matches_torch():
    from ppo_trt.envs.batched.triton_cartpole import check_against_torch
    from ppo_trt.throughput.env_bench import triton_throughput
    r = check_against_torch(num_envs=4096, n_steps=30, seed=5, device='cuda')
    # the GPU's cos/sin and FMA contraction round differently from torch's kernels: allow the rare threshold crossing
    assert r['done_mismatches'] <= 4 and r['max_abs_state'] < 1e-4, r
    rows = triton_throughput((1 << 16,), launches=3, repeats=2)
    assert rows[0]['steps_per_s'] > 0 and rows[0]['device'].startswith('cuda')


def test_device_rollout_never_synchronises():
    from ppo_trt.envs.batched.torch import make_batched, device_rollout
    env = make_batched('Pendulum-v1', 4096, 'cuda')
    mlp = torch.nn.Sequential(torch.nn.Linear(3, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)).cuda()
    device_rollout(env, mlp, 5)  # allocations and lazy init outside the checked region
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode('error')
    try: total = device_rollout(env, mlp, 50)
    finally: torch.cuda.set_sync_debug_mode('default')
    assert total.shape == (4096,) and bool(torch.isfinite(total).all())


def test_fast_ppo_cudagraphs_solves_cartpole(tmp_path):
    r = ppo_trt('train', '--fast', '--env-id', 'CartPole-v1', '--device', 'cuda', '--cudagraphs',
                '--run-dir', tmp_path/'cp')
    assert r.returncode == 0, r.stderr[-3000:]
    rec = load_json(tmp_path/'cp'/'train.json')
    assert rec['solved'] and rec['final_eval_mean'] >= 475, rec


def test_checked_step_takes_tensors_made_on_cuda():
    "resolve_device('cuda') carries the index (cuda:0) the tensors get: a checked step takes `device='cuda'` actions."
    from ppo_trt.envs.batched.torch import make_batched
    from ppo_trt.envs.batched.triton_cartpole import TritonCartPole
    env = make_batched('CartPole-v1', 64, 'cuda')
    obs = env.step(torch.zeros(64, dtype=torch.int64, device='cuda'))[0]
    assert obs.device == env.device and obs.shape == (64, 4)
    k = TritonCartPole(64, 'cuda')
    assert k.device == torch.empty(0, device='cuda').device
    assert k.run(3, torch.ones(3, 64, dtype=torch.int64, device='cuda'), record=True).shape == (3, 64)
