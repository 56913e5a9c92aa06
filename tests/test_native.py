"""The native backends (numba, C): parity on the real run, unsupported graphs skipped with the reason."""
import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper, TensorProto
from ppo_trt.backends import registry as B
from ppo_trt.core.files import load_json

@pytest.mark.parametrize('name', ['native', 'native-c'])
def test_native_parity_and_compile_facts(run_dir, name):
    obs = np.load(run_dir/'export_obs.npy')
    native, ort = B.load(name, run_dir), B.load('ort', run_dir)
    assert np.abs(native(obs) - ort(obs)).max() <= 1e-5
    one = np.concatenate([native(obs[i:i + 1]) for i in range(100)])
    assert np.abs(one - ort(obs[:100])).max() <= 1e-5
    assert native.info['compile_s'] >= 0 and native.info['build']
    rec = next(r for r in load_json(run_dir/'bench.json')['records'] if r['backend'] == name and r['mode'] == 'latency')
    assert rec['parity_vs_ort_fp32']['max_abs_err'] <= 1e-5 and 'compile_s' in rec['info']

def test_unsupported_graph_is_skipped_with_reason(tmp_path):
    w = numpy_helper.from_array(np.ones((4, 2), np.float32), 'W')
    g = helper.make_graph([helper.make_node('MatMul', ['obs', 'W'], ['h']),
                           helper.make_node('Softmax', ['h'], ['action'])], 'g',
                          [helper.make_tensor_value_info('obs', TensorProto.FLOAT, ['B', 4])],
                          [helper.make_tensor_value_info('action', TensorProto.FLOAT, ['B', 2])], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid('', 17)], ir_version=9), tmp_path/'policy.onnx')
    for name in ('native', 'native-c'):
        with pytest.raises(B.BackendUnavailable, match=r"cannot compile ops \['Softmax'\]"): B.load(name, tmp_path)

def test_native_c_refuses_wrong_arrays(run_dir):
    r = B.load('native-c', run_dir)
    obs = np.load(run_dir/'export_obs.npy')
    with pytest.raises(ValueError, match='C-contiguous float32'): r.run(np.asfortranarray(obs[:8]))
    with pytest.raises(ValueError, match='C-contiguous float32'): r.run(obs[:8].astype(np.float64))


def test_native_c_batches_give_the_one_row_bits_and_name_their_kernel(run_dir):
    "6-row tiles and single rows compute the same sums in the same order; the extension says which kernel it runs."
    from ppo_trt.export.c_kernel import compile_c_policy
    pol = compile_c_policy(run_dir/'policy.onnx')
    obs = np.load(run_dir/'export_obs.npy')[:25]
    batch, rows = np.empty((25, pol.act_dim), np.float32), np.empty((25, pol.act_dim), np.float32)
    pol.forward(obs, batch)
    for i in range(25): pol.forward(obs[i:i + 1], rows[i:i + 1])
    assert batch.tobytes() == rows.tobytes()
    assert pol.kernel in ('avx512', 'avx2+fma', 'sse2', 'portable C')
