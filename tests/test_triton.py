"""The Triton kernels on the CPU, through Triton's interpreter: the fused policy MLP and the CartPole kernel compute
what the reference computes."""
import numpy as np
import pytest
import torch
from ppo_trt.backends import registry as B
from ppo_trt.core.files import BadInputError
from ppo_trt.export.triton_mlp import compile_triton_policy, triton_interpreted

pytestmark = pytest.mark.skipif(torch.cuda.is_available(),
                                reason='a GPU is present: the compiled kernels are tested in test_gpu.py')


def test_triton_mlp_matches_ort_on_the_run(run_dir):
    pol = compile_triton_policy(run_dir/'policy.onnx')
    assert pol.interpreted and triton_interpreted()
    obs = np.load(run_dir/'export_obs.npy')
    ref = B.load('ort', run_dir)(obs)
    for n in (1, 7, 100, len(obs)):
        out = pol.forward(torch.as_tensor(obs[:n]), torch.empty(n, pol.act_dim))
        assert np.abs(out.numpy() - ref[:n]).max() <= 1e-5, n
    assert 'tl.dot' in pol.source and len(pol.key) == 16


def test_triton_backends_refuse_without_gpu(run_dir):
    for name in ('triton', 'triton-tf32'):
        ok, why = B.available()[name]
        assert not ok and 'no CUDA GPU' in why
        with pytest.raises(B.BackendUnavailable, match='no CUDA GPU'): B.load(name, run_dir)


def test_triton_cartpole_follows_the_torch_env():
    from ppo_trt.envs.batched.triton_cartpole import check_against_torch, TritonCartPole
    from ppo_trt.throughput.env_bench import triton_throughput
    r = check_against_torch(num_envs=2048, n_steps=30, seed=11)
    assert r['done_mismatches'] == 0 and r['envs_without_reset'] > 100 and r['max_abs_state'] < 1e-5, r
    with pytest.raises(BadInputError, match='CUDA GPU only'): triton_throughput(device='cpu')
    with pytest.raises(BadInputError, match='shape'):
        TritonCartPole(8, 'cpu').run(3, torch.zeros(2, 8, dtype=torch.int64))
