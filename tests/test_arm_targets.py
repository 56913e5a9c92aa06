"""The C library on ARM targets (export.targets, measure.targets, `ppo-trt export-c --target`): the NEON kernel under
qemu-aarch64 with the AVX kernels' bits, the Cortex-M4F firmware on QEMU's mps2-an386, parity against ONNX Runtime,
sizes, stack, instructions per action and the real-time facts in the header. Skipped, with the Debian package to
install, where a cross toolchain or QEMU is missing (.ci/run installs them)."""
import hashlib, json, os, re, shutil, subprocess, sys, tempfile
from pathlib import Path
import numpy as np
import pytest
from conftest import ppo_trt
from ppo_trt.core.files import PpoTrtError
from ppo_trt.core.records import read_record
from ppo_trt.export.onnx_graph import Dense, Elementwise
from ppo_trt.export.c_kernel import kernel_source
from ppo_trt.export.targets import target_missing
import ppo_trt.measure.targets as stage

A64, M4 = target_missing('aarch64'), target_missing('cortex-m4f')
needs_a64 = pytest.mark.skipif(bool(A64), reason=A64 or 'the aarch64 toolchain and qemu-aarch64 are here')
needs_m4 = pytest.mark.skipif(bool(M4), reason=M4 or 'arm-none-eabi-gcc and qemu-system-arm are here')

DRIVER = r"""#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
typedef long npy_intp;
#include "kernel.h"
int main(void) {  /* n rows in, one by one and batched out */
    int n; if (fread(&n, sizeof n, 1, stdin) != 1) return 1;
    float *x = malloc(sizeof(float) * n * 11), *y = malloc(sizeof(float) * 2 * n * 3);
    if (fread(x, sizeof(float), (size_t)n * 11, stdin) != (size_t)n * 11) return 1;
    for (int r = 0; r < n; r++) forward_one(x + r * 11, y + r * 3);
    forward_n(x, y + n * 3, n);
    fprintf(stderr, "%s", PPO_KERNEL);
    fwrite(y, sizeof(float), (size_t)2 * n * 3, stdout); return 0;
}
"""

def _chain(seed=0):
    "A Hopper-shaped chain: normalise, 11 -> 64 -> 64 -> 3 with tanh, clip."
    rng = np.random.default_rng(seed)
    w = lambda a, b: rng.normal(size=(a, b)).astype(np.float32) / np.sqrt(a)
    b = lambda n: rng.normal(size=n).astype(np.float32) * 0.1
    return [Elementwise('sub', b(11)), Dense(w(11, 64), b(64)), Elementwise('tanh'), Dense(w(64, 64), b(64)),
            Elementwise('tanh'), Dense(w(64, 3), b(3)), Elementwise('clip', np.float32(-1), np.float32(1))], (11, 3)

def _run_kernel(cc, flags, kernel, x, wrap=()):
    "(kernel name, one-row outputs, batch outputs) of `kernel` built by `cc` with `flags`."
    with tempfile.TemporaryDirectory() as d:
        Path(d, 'kernel.h').write_text(kernel); Path(d, 'main.c').write_text(DRIVER)
        subprocess.run([cc, *flags, '-std=gnu11', 'main.c', '-lm', '-o', 'k'], cwd=d, check=True, capture_output=True)
        r = subprocess.run([*wrap, str(Path(d, 'k'))], input=np.int32(len(x)).tobytes() + x.tobytes(),
                           capture_output=True, check=True)
    y = np.frombuffer(r.stdout, np.float32).reshape(2, len(x), 3)
    return r.stderr.decode(), y[0], y[1]

def _host_fma():
    r = subprocess.run(['cc', '-march=native', '-dM', '-E', '-x', 'c', '/dev/null'], capture_output=True, text=True)
    return '#define __FMA__ 1' in r.stdout

@needs_a64
def test_neon_gives_the_avx_kernels_bits():
    "NEON computes the same partial sums in the same order with fused multiply-adds: the AVX2 kernel's bits."
    steps, dims = _chain()
    kernel = kernel_source(steps, dims)
    x = np.random.default_rng(1).normal(size=(13, 11)).astype(np.float32) * 3  # two 6-row tiles and a row; saturating
    name, one, batch = _run_kernel('aarch64-linux-gnu-gcc', ('-O3', '-static'), kernel, x, ('qemu-aarch64',))
    assert name == 'neon' and np.array_equal(one, batch)
    portable, p_one, _ = _run_kernel('aarch64-linux-gnu-gcc', ('-O3', '-static', '-DPPO_POLICY_PORTABLE'), kernel, x,
                                     ('qemu-aarch64',))
    assert portable == 'portable C' and np.abs(p_one - one).max() < 1e-6
    if not _host_fma(): pytest.skip('this machine has no FMA: its kernels round differently from NEON')
    avx, a_one, _ = _run_kernel('cc', ('-O3', '-mavx2', '-mfma'), kernel, x)
    assert avx == 'avx2+fma' and np.array_equal(one, a_one)

def _tamper(text):
    "The test vectors with the first expected action replaced by 9: the emulated test must fail."
    return re.sub(r'(ppo_test_act\[\d+\]\[\d+\] = \{\n    \{)([^,]+)', r'\g<1>9.0f', text, count=1)

def _hashes(folder):
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(folder).rglob('*')) if p.is_file()}

@pytest.fixture(scope='module')
def a64_run(run_dir, tmp_path_factory):
    "A copy of the session run with its library exported for aarch64 by the CLI."
    d = tmp_path_factory.mktemp('a64')/'run'
    shutil.copytree(run_dir, d)
    r = ppo_trt('export-c', '--run-dir', d, '--target', 'aarch64')
    assert r.returncode == 0 and 'Traceback' not in r.stderr, r.stdout[-3000:] + r.stderr[-3000:]
    assert 'PASS' in r.stdout
    return d

@pytest.mark.slow  # over 7 s: with the long checks (pytest -m slow tests)
@needs_a64
def test_export_c_target_aarch64(a64_run):
    rec = read_record(a64_run/'c_target_aarch64.json')
    p = rec.parity
    assert rec.kernel == 'neon' and rec.portable['kernel'] == 'portable C'
    assert p['rows'] == 1000 and p['max_abs_err'] <= 1e-6 and p['max_abs_err_batched'] <= 1e-6
    assert (p['nan_status'], p['nan_status_batched'], p['nan_action']) == (2, 2, 'untouched')
    assert rec.counted_rows == 100 and 0 < rec.instructions['fewest'] <= rec.instructions['most']
    assert rec.instructions['most'] < rec.portable['instructions']['mean']  # NEON: fewer instructions than plain C
    assert rec.ram_bytes == 0 and 0 < rec.stack_bytes < 4096 and rec.const_bytes >= 4 * (11 * 64 + 64 * 64 + 64 * 3)
    assert rec.estimate['headroom'] > 1 and rec.estimate['control_period_s'] == 0.008
    lib = Path(rec.path)
    header = (lib/'ppo_policy.h').read_text()
    assert '#define PPO_POLICY_TARGET_KERNEL "neon"' in header and 'ESTIMATE, not a measurement' in header
    assert f"#define PPO_POLICY_TARGET_WORST_INSTRUCTIONS {rec.instructions['most']}" in header
    manifest = json.loads((lib/'manifest.json').read_text())
    assert {k: v for k, v in _hashes(lib).items() if k in manifest['files']} == manifest['files']
    assert {'ppo_policy.h', 'aarch64/Makefile', 'aarch64/test_ppo_policy'} <= set(manifest['files'])

@pytest.mark.slow  # over 7 s: with the long checks (pytest -m slow tests)
@needs_a64
def test_a_target_that_fails_its_test_leaves_the_library_as_it_was(a64_run, monkeypatch):
    lib, record = a64_run/'c_policy_aarch64', a64_run/'c_target_aarch64.json'
    before, rec_before = _hashes(lib), record.read_bytes()
    real = stage.library_files
    monkeypatch.setattr(stage, 'library_files', lambda *a: (lambda f: {**f, 'ppo_policy_vectors.h':
                                                                       _tamper(f['ppo_policy_vectors.h'])})(real(*a)))
    with pytest.raises(PpoTrtError, match='failed its test on the emulated aarch64'):
        stage.export_target(a64_run, 'aarch64')
    assert _hashes(lib) == before and record.read_bytes() == rec_before
    assert not [p for p in a64_run.iterdir() if '.building-' in p.name]  # the staging folder is gone

@pytest.mark.slow  # over 9 s on a slow 2-core box: with the long checks (pytest -m slow tests)
@needs_m4
def test_export_c_target_cortex_m4f(run_copy):
    r = ppo_trt('export-c', '--run-dir', run_copy, '--target', 'cortex-m4f')
    assert r.returncode == 0 and 'Traceback' not in r.stderr and 'PASS' in r.stdout, r.stdout[-3000:] + r.stderr
    rec = read_record(run_copy/'c_target_cortex-m4f.json')
    p, s = rec.parity, rec.systick
    assert rec.kernel == 'portable C' and p['max_abs_err'] <= 1e-5 and p['max_abs_err_batched'] <= 1e-5
    assert (p['nan_status'], p['nan_action']) == (2, 'untouched')
    assert rec.ram_bytes == 0 and 0 < rec.stack_bytes < 2048 and rec.firmware['flash_bytes'] > rec.const_bytes
    assert s['calls'] == 1000 and s['agrees_with_trace'] and rec.instructions['most'] >= s['most']
    assert any('-Wdouble-promotion' in c for c in rec.commands)  # single precision only, warning-free
    assert rec.estimate['device'] == 'a 168 MHz STM32F4' and rec.estimate['cycles_per_instruction'] == 2.0
    board = Path(rec.path)/'cortex-m4f'
    for f in ('startup.c', 'mps2_an386.ld', 'Makefile', 'count_ppo_policy.c', 'test_ppo_policy.elf'):
        assert (board/f).is_file(), f
    assert '#define PPO_POLICY_TARGET "cortex-m4f"' in (Path(rec.path)/'ppo_policy.h').read_text()

def test_a_missing_toolchain_is_one_line_naming_the_package(run_dir, tmp_path, monkeypatch):
    monkeypatch.setenv('PATH', str(tmp_path))
    assert target_missing('aarch64') == ('no aarch64-linux-gnu-gcc on this machine: install it '
                                         '(apt-get install gcc-aarch64-linux-gnu)')
    assert target_missing('cortex-m4f') == ('no qemu-system-arm on this machine: install it '
                                            '(apt-get install qemu-system-arm)')
    env = {**os.environ, 'PATH': str(Path(sys.executable).parent), 'PYTHONWARNINGS': 'ignore'}
    r = subprocess.run([str(Path(sys.executable).with_name('ppo-trt')), 'export-c', '--run-dir', str(run_dir),
                        '--target', 'aarch64'], capture_output=True, text=True, env=env)
    assert r.returncode != 0 and 'Traceback' not in r.stderr and r.stderr.count('\n') == 1, r.stderr
    assert 'apt-get install gcc-aarch64-linux-gnu' in r.stderr and not (run_dir/'c_policy_aarch64').exists()
