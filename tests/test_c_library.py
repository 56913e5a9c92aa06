"""The C library (`ppo-trt export-c`): written from a real run's policy.onnx, built warning-free under strict C99 with
every compiler here at -O2 and -O3 and with every kernel (portable C, SSE2, AVX2, -march=native), equal to ONNX Runtime
within 1e-6 on every export observation and refusing a NaN observation in each; its timing harness runs and reports;
bad input is one line and changes nothing."""
import hashlib, shutil, subprocess
from pathlib import Path
import numpy as np, pytest
from conftest import ppo_trt
from ppo_trt.core.files import PpoTrtError
from ppo_trt.export.c_library import build_and_test, bench_c_library, parse_bench, LIBRARY_MARKER, STRICT

COMPILERS = [cc for cc in ('gcc', 'clang') if shutil.which(cc)]
KERNELS = ('avx512', 'avx2+fma', 'sse2', 'portable C')
KERNEL_FLAGS = {'portable C': ('-DPPO_POLICY_PORTABLE',), 'sse2': (), 'avx2+fma': ('-mavx2', '-mfma'),
                'native': ('-march=native',), 'native without AVX-512': ('-march=native', '-mno-avx512f')}
NEEDS = {'sse2': '__SSE2__', 'avx2+fma': '__AVX2__', 'native without AVX-512': '__AVX512F__'}


def _native_macros():
    if not shutil.which('cc'): return set()
    r = subprocess.run(['cc', '-march=native', '-dM', '-E', '-x', 'c', '/dev/null'], capture_output=True, text=True)
    return {l.split()[1] for l in r.stdout.splitlines() if l.startswith('#define')}


NATIVE_MACROS = _native_macros()

DUMP = r"""#include <stdio.h>
#include "ppo_policy.h"
#include "ppo_policy_vectors.h"
static float one[PPO_TEST_ROWS][PPO_POLICY_ACT_DIM], many[PPO_TEST_ROWS][PPO_POLICY_ACT_DIM];
int main(void) {  /* every export observation's action, one call each, then one batched call */
    int r;
    for (r = 0; r < PPO_TEST_ROWS; r++) if (ppo_policy_act(ppo_test_obs[r], one[r])) return 1;
    if (ppo_policy_act_batch(&ppo_test_obs[0][0], &many[0][0], PPO_TEST_ROWS)) return 1;
    fwrite(one, sizeof one, 1, stdout); fwrite(many, sizeof many, 1, stdout); return 0;
}
"""


def _actions(library, tmp, flags):
    "(kernel, actions one call each, actions batched) of `library` built with `flags`."
    d = Path(tmp); shutil.copytree(library, d)
    (d/'dump.c').write_text(DUMP)
    b = subprocess.run(['cc', '-O3', *flags, *STRICT, 'ppo_policy.c', 'dump.c', '-lm', '-o', 'dump'], cwd=d,
                       capture_output=True, text=True)
    assert b.returncode == 0 and b.stderr == '', b.stderr[-2000:]
    r = subprocess.run([str(d/'dump')], capture_output=True)
    assert r.returncode == 0
    y = np.frombuffer(r.stdout, np.float32).reshape(2, -1)
    return y[0], y[1]


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


@pytest.mark.slow  # over 9 s on a slow 2-core box: with the long checks (pytest -m slow tests)
def test_rewritten_over_its_own_library(library, run_dir, tmp_path):
    "export-c again over its own library replaces its files; one the user edited since is kept, the rerun refusing."
    d = tmp_path/'lib'; shutil.copytree(library, d)
    r = ppo_trt('export-c', '--run-dir', run_dir, '--out', d, '--cc', 'none')
    assert r.returncode == 0, r.stderr
    assert (d/LIBRARY_MARKER).is_file() and (d/'ppo_policy.c').read_text() == (library/'ppo_policy.c').read_text()
    (d/'ppo_policy.c').write_text('/* an edit of the user\'s */')
    r = ppo_trt('export-c', '--run-dir', run_dir, '--out', d, '--cc', 'none')
    assert r.returncode == 2 and 'ppo_policy.c was edited since ppo-trt made it' in r.stderr, r.stderr
    assert (d/'ppo_policy.c').read_text() == "/* an edit of the user's */"


@pytest.mark.slow  # over 9 s on a slow 2-core box: with the long checks (pytest -m slow tests)
def test_default_run_folder(run_dir, tmp_path):
    "Without --run-dir, export-c works on the default run folder (runs/Hopper-v4-ppo), as every stage does."
    (tmp_path/'runs').mkdir(); shutil.copytree(run_dir, tmp_path/'runs'/'Hopper-v4-ppo')
    r = ppo_trt('export-c', cwd=tmp_path)
    assert r.returncode == 0 and '0 failed calls' in r.stdout, r.stderr[-1500:]
    assert (tmp_path/'runs'/'Hopper-v4-ppo'/'c_policy'/'ppo_policy.h').is_file()


def _skip_unless_runs(kernel):
    if not shutil.which('cc'): pytest.skip('no C compiler (cc) on this machine')
    if kernel in NEEDS and NEEDS[kernel] not in NATIVE_MACROS: pytest.skip(f'this CPU does not run {kernel}')


@pytest.mark.parametrize('kernel', list(KERNEL_FLAGS))
def test_every_kernel_matches_ort_and_refuses_a_nan(library, tmp_path, kernel):
    _skip_unless_runs(kernel)
    d = tmp_path/'lib'; shutil.copytree(library, d)
    r = build_and_test(d, 'cc', '-O3', KERNEL_FLAGS[kernel])
    assert r['ok'] and r['warnings'] == '', r
    built = r['output'].split('(kernel ')[1].split(')')[0]
    assert built == kernel if kernel in KERNELS else built in KERNELS, r['output']
    err = float(r['output'].split('max abs err vs ONNX Runtime ')[1].split()[0])
    assert err <= 1e-6 and 'NaN obs: status 2 (batched 2), action untouched' in r['output'], r['output']


def test_avx512_and_avx2_give_the_same_bits_as_sse2_and_portable_c_do(library, tmp_path):
    "The kernels compute the same sums in the same order: the instruction set changes the speed, not the actions."
    _skip_unless_runs('native without AVX-512')
    wide = [_actions(library, tmp_path/k, KERNEL_FLAGS[k]) for k in ('native', 'native without AVX-512')]
    narrow = [_actions(library, tmp_path/k.replace(' ', '_'), KERNEL_FLAGS[k]) for k in ('sse2', 'portable C')]
    for one, batch in wide + narrow: assert one.tobytes() == batch.tobytes()  # batched: the one-row kernel's bits
    assert wide[0][0].tobytes() == wide[1][0].tobytes() and narrow[0][0].tobytes() == narrow[1][0].tobytes()
    assert 0 < np.abs(wide[0][0] - narrow[0][0]).max() <= 1e-6  # FMA or not: an ulp or so, never more


def test_the_timing_harness_prints_its_percentiles(library):
    if not shutil.which('cc'): pytest.skip('no C compiler (cc) on this machine')
    r = bench_c_library(library, calls=20_000, target_ns=1e9)
    assert r['calls'] == 20_000 and r['failed_calls'] == 0 and (r['nan_status'], r['nan_action']) == (2, 'untouched')
    assert 0 < r['p50_ns'] <= r['p99_ns'] <= r['p999_ns'] <= r['max_ns'] and 0 < r['block_min_ns'] <= r['block_p50_ns']
    assert r['timer_cost_ns'] >= 0 and r['timer_resolution_ns'] > 0 and r['kernel'] in KERNELS and r['warnings'] == ''
    assert 'target: p50 <= 1000000000 ns per call: met' in r['output']


def test_the_harness_refuses_a_library_that_skips_the_observation_check(library, tmp_path):
    "Speed bought by dropping the check is caught: a NaN observation must be refused before any action is computed."
    if not shutil.which('cc'): pytest.skip('no C compiler (cc) on this machine')
    d = tmp_path/'lib'; shutil.copytree(library, d)
    c = (d/'ppo_policy.c').read_text()
    check = '    if (!all_finite(obs, PPO_POLICY_OBS_DIM)) return PPO_POLICY_NONFINITE_OBS;\n'
    assert c.count(check) == 1
    (d/'ppo_policy.c').write_text(c.replace(check, ''))
    with pytest.raises(PpoTrtError, match=r'(?s)the harness failed its checks: .*NaN obs: status 3'):
        bench_c_library(d, calls=2_000)


def test_make_bench_builds_the_harness(library, tmp_path):
    if not shutil.which('make') or not shutil.which('cc'): pytest.skip('no make or cc on this machine')
    d = tmp_path/'lib'; shutil.copytree(library, d)
    r = subprocess.run(['make', '-s', 'bench_ppo_policy'], cwd=d, capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr == '', r.stderr
    out = subprocess.run([str(d/'bench_ppo_policy'), '5000'], capture_output=True, text=True)
    assert out.returncode == 0 and parse_bench(out.stdout)['calls'] == 5000, out.stdout + out.stderr
