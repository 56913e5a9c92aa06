"""The C library (`ppo-trt export-c`): written from a real run's policy.onnx, built warning-free under strict C99 with
every compiler here at -O2 and -O3, and equal to ONNX Runtime within 1e-6 on every export observation; bad input is one
line and changes nothing."""
import hashlib, shutil, subprocess
from pathlib import Path
import numpy as np, pytest
from conftest import ppo_trt
from ppo_trt.export.c_library import build_and_test, LIBRARY_MARKER

COMPILERS = [cc for cc in ('gcc', 'clang') if shutil.which(cc)]


def _tree(folder):
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(folder).rglob('*')) if p.is_file()}


@pytest.fixture(scope='module')
def library(run_dir, tmp_path_factory):
    "The C library of the end-to-end run's policy, written by the CLI (which builds and tests it with cc)."
    out = tmp_path_factory.mktemp('c')/'ppo_policy'
    r = ppo_trt('export-c', '--run-dir', run_dir, '--out', out)
    assert r.returncode == 0, r.stderr[-2000:]
    assert 'no warnings' in r.stdout and '0 failed calls' in r.stdout and 'action untouched' in r.stdout, r.stdout
    return out


@pytest.mark.skipif(not COMPILERS, reason='no gcc or clang on this machine')
@pytest.mark.parametrize('opt', ['-O2', '-O3'])
@pytest.mark.parametrize('cc', COMPILERS)
def test_builds_warning_free_and_matches_ort(library, tmp_path, cc, opt):
    d = tmp_path/'lib'; shutil.copytree(library, d)
    r = build_and_test(d, cc, opt)
    assert r['ok'] and r['warnings'] == '', r
    err = float(r['output'].split('max abs err vs ONNX Runtime ')[1].split()[0])
    assert err <= 1e-6 and 'NaN obs: status 2 (batched 2), action untouched' in r['output'], r['output']


def test_header_names_its_policy_and_the_makefile_runs_the_test(library, run_dir, tmp_path):
    header = (library/'ppo_policy.h').read_text()
    onnx_sha = hashlib.sha256((run_dir/'policy.onnx').read_bytes()).hexdigest()
    assert f'sha256 {onnx_sha}' in header and '#define PPO_POLICY_ENV_ID "Hopper-v4"' in header
    assert 'int ppo_policy_act(const float obs[PPO_POLICY_OBS_DIM], float act[PPO_POLICY_ACT_DIM]);' in header
    if not shutil.which('make'): pytest.skip('no make on this machine')
    d = tmp_path/'lib'; shutil.copytree(library, d)
    r = subprocess.run(['make', '-s', 'test'], cwd=d, capture_output=True, text=True)
    assert r.returncode == 0 and '0 failed calls' in r.stdout, r.stdout + r.stderr


def test_a_folder_of_the_user_is_refused_and_left_alone(run_dir, tmp_path):
    mine = tmp_path/'mine'; mine.mkdir(); (mine/'controller.c').write_text('int main(void) { return 0; }')
    before = _tree(mine)
    r = ppo_trt('export-c', '--run-dir', run_dir, '--out', mine)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and 'not made by' in r.stderr, r.stderr
    assert _tree(mine) == before


def test_a_policy_with_a_nan_weight_is_refused(run_copy, tmp_path):
    import onnx
    from onnx import numpy_helper
    m = onnx.load(run_copy/'policy.onnx')
    w = m.graph.initializer[0]
    bad = numpy_helper.to_array(w).copy(); bad.flat[0] = np.nan
    w.CopyFrom(numpy_helper.from_array(bad, w.name)); onnx.save(m, run_copy/'policy.onnx')
    r = ppo_trt('export-c', '--run-dir', run_copy, '--out', tmp_path/'lib')
    assert r.returncode == 2 and 'holds 1 NaN' in r.stderr and 'Traceback' not in r.stderr, r.stderr
    assert not (tmp_path/'lib').exists()


def test_rewritten_over_its_own_library(library, run_dir, tmp_path):
    d = tmp_path/'lib'; shutil.copytree(library, d)
    (d/'ppo_policy.c').write_text('/* an edit that a new export replaces */')
    r = ppo_trt('export-c', '--run-dir', run_dir, '--out', d, '--cc', 'none')
    assert r.returncode == 0, r.stderr
    assert (d/LIBRARY_MARKER).is_file() and (d/'ppo_policy.c').read_text() == (library/'ppo_policy.c').read_text()


def test_default_run_folder(run_dir, tmp_path):
    "Without --run-dir, export-c works on the default run folder (runs/Hopper-v4-ppo), as every stage does."
    (tmp_path/'runs').mkdir(); shutil.copytree(run_dir, tmp_path/'runs'/'Hopper-v4-ppo')
    r = ppo_trt('export-c', cwd=tmp_path)
    assert r.returncode == 0 and '0 failed calls' in r.stdout, r.stderr[-1500:]
    assert (tmp_path/'runs'/'Hopper-v4-ppo'/'c_policy'/'ppo_policy.h').is_file()
