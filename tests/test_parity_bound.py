"""Parity is a float32 bound scaled to the output (`parity_bound`): an actor whose raw actions reach tens (Isaac Lab
applies its action scale outside the network) passes export-c's C test, whose summation order differs from ONNX
Runtime's; the same C test refuses actions one weight off by 1e-3."""
import re
from pathlib import Path
import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from actors import export, mlp, with_metadata
from conftest import ppo_trt
from ppo_trt.export.c_library import build_and_test, compiler_missing, install_c_library
from ppo_trt.export.c_library import test_vectors as vectors_header  # not a test
from ppo_trt.export.onnx import F32_EPS, PARITY_EPS, ort_cpu_session, parity_bound

pytestmark = pytest.mark.skipif(bool(compiler_missing('cc')), reason=compiler_missing('cc') or 'cc')


def large_actions(path, widths=(17, 64, 64, 6), gain=50.0):
    "An ELU actor of `widths` whose last layer is scaled by `gain`: raw actions of tens, saved at `path`."
    m = export(mlp(widths, 'ELU'), [(2, widths[0])], ['obs'], ['action'])
    last = [i for i in m.graph.initializer if len(i.dims) == 2][-1]
    last.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(last) * np.float32(gain), last.name))
    return with_metadata(m, path)


def ort_actions(path, obs): return ort_cpu_session(str(path)).run(None, {'obs': obs})[0]


def test_the_bound_scales_with_the_output():
    assert parity_bound([[0.2, -0.5]]) == PARITY_EPS * F32_EPS  # below 1: the bound of 1
    assert parity_bound([[58.0, -3.0, np.nan]]) == pytest.approx(58 * PARITY_EPS * F32_EPS)  # NaN has no scale
    assert 1e-5 < parity_bound([[1.0]]) < 2e-5 < parity_bound([[58.0]]) < 1e-3


def test_the_c_test_passes_large_actions_and_refuses_one_weight_off(tmp_path):
    policy = large_actions(tmp_path/'policy.onnx')
    obs = np.random.default_rng(0).uniform(-3, 3, (200, 17)).astype(np.float32)
    act = ort_actions(policy, obs)
    assert np.abs(act).max() > 10  # raw actions of tens
    lib = Path(install_c_library(policy, obs, tmp_path/'c', 'cc')['path'])
    built = build_and_test(lib)
    err, tol = map(float, re.search(r'max abs err vs ONNX Runtime (\S+) one by one.*\(tolerance (\S+)\)',
                                    built['output']).groups())
    assert built['ok'] and err <= tol and tol == pytest.approx(parity_bound(act), rel=1e-2), built['output']
    m = onnx.load(str(policy))  # the same actor, one weight of its second layer off by 1e-3
    w = [i for i in m.graph.initializer if len(i.dims) == 2][1]
    a = numpy_helper.to_array(w).copy(); a[3, 5] += 1e-3
    w.CopyFrom(numpy_helper.from_array(a, w.name)); onnx.save(m, str(tmp_path/'off.onnx'))
    (lib/'ppo_policy_vectors.h').write_text(vectors_header(obs, ort_actions(tmp_path/'off.onnx', obs)))
    assert not build_and_test(lib)['ok']


@pytest.mark.slow  # builds an Isaac-Lab-sized library: seconds
def test_export_c_takes_an_isaac_sized_actor_with_raw_actions(tmp_path):
    policy = large_actions(tmp_path/'policy.onnx', (48, 512, 256, 128, 12))
    r = ppo_trt('export-c', policy, '--out', tmp_path/'c', '--obs-range=-3:3')
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    tol = float(re.search(r'#define PPO_TEST_TOL (\S+)', (tmp_path/'c'/'ppo_policy_vectors.h').read_text()).group(1))
    assert tol > 1e-5  # scaled to actions of tens, where a bare 1e-6 refused every such actor
