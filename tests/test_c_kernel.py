"""The generated C kernel (`export.c_kernel._kernels`) under every instruction set this machine runs: random chains
(wide and narrow layers, every elementwise op, scalar and vector constants) against float64 NumPy, the batch kernel
giving the one-row kernel's bits, AVX-512 and AVX2 giving the same bits (as SSE2 and portable C without FMA do; portable
C with FMA within an ulp: GCC folds a saturated tanh without fusing), a NaN observation coming out NaN (never clamped
into a plausible action), on stack and heap scratch."""
import shutil, subprocess
from pathlib import Path
import numpy as np, pytest
from ppo_trt.export import c_kernel
from ppo_trt.export.numba_kernel import Dense, Elementwise

pytestmark = pytest.mark.skipif(shutil.which('cc') is None, reason='no C compiler (cc) on this machine')

DRIVER = r"""#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
typedef long npy_intp;
#include "kernel.h"
int main(void) {  /* n rows of OBS floats in; their actions one by one, then as one batch, out */
    int n; if (fread(&n, sizeof n, 1, stdin) != 1) return 1;
    float *x = malloc(sizeof(float) * n * OBS), *y = malloc(sizeof(float) * 2 * n * ACT);
    if (fread(x, sizeof(float), (size_t)n * OBS, stdin) != (size_t)n * OBS) return 1;
    for (int r = 0; r < n; r++) if (forward_one(x + r * OBS, y + r * ACT)) return 1;
    if (forward_n(x, y + n * ACT, n)) return 1;
    fprintf(stderr, "%s", PPO_KERNEL);
    fwrite(y, sizeof(float), (size_t)2 * n * ACT, stdout); return 0;
}
"""

NATIVE = ('-O3', '-march=native', '-ffp-contract=fast')
BUILDS = {'avx512': NATIVE, 'avx2+fma': (*NATIVE, '-mno-avx512f'), 'sse2': ('-O3',),
          'portable C, FMA': (*NATIVE, '-DPPO_POLICY_PORTABLE'), 'portable C': ('-O3', '-DPPO_POLICY_PORTABLE')}
NEEDS = {'avx512': '__AVX512F__', 'avx2+fma': '__AVX2__', 'sse2': '__SSE2__', 'portable C, FMA': '__FMA__'}
SAME_BITS = (('avx512', 'avx2+fma'), ('sse2', 'portable C'))


def _native_macros():
    r = subprocess.run(['cc', '-march=native', '-dM', '-E', '-x', 'c', '/dev/null'], capture_output=True, text=True)
    return {l.split()[1] for l in r.stdout.splitlines() if l.startswith('#define')}


RUNNABLE = [b for b in BUILDS if b not in NEEDS or NEEDS[b] in _native_macros()]


def _chain(seed, widths, ops):
    "Dense layers of `widths` (first = obs), each followed by ops from `ops` (name -> Elementwise maker)."
    rng = np.random.default_rng(seed)
    steps = [Elementwise('sub', rng.normal(size=widths[0]).astype(np.float32)),
             Elementwise('div', rng.uniform(0.5, 2, widths[0]).astype(np.float32)),
             Elementwise('clip', np.float32(-5), np.float32(5))]
    for k, (a, b) in enumerate(zip(widths[:-1], widths[1:])):
        steps.append(Dense((rng.normal(size=(a, b)) / np.sqrt(a)).astype(np.float32),
                           rng.normal(size=b).astype(np.float32) * 0.1))
        steps += [make(rng, b) for make in ops[k % len(ops)]]
    return steps, (widths[0], widths[-1])


OPS = [
    [lambda rng, w: Elementwise('tanh')],
    [lambda rng, w: Elementwise('relu'),
     lambda rng, w: Elementwise('mul', rng.uniform(0.5, 1.5, w).astype(np.float32))],
    [lambda rng, w: Elementwise('elu', alpha=0.7), lambda rng, w: Elementwise('add', np.float32(0.25))],
    [lambda rng, w: Elementwise('sigmoid'), lambda rng, w: Elementwise('max', rng.normal(size=w).astype(np.float32))],
    [lambda rng, w: Elementwise('min', np.float32(0.5))],
]
CHAINS = {  # the Hopper shape, a narrow input and a 1-wide head, odd widths with every op kind
    'hopper': _chain(0, (11, 64, 64, 3), [OPS[0], OPS[0], [lambda rng, w: Elementwise('clip', -np.ones(w, np.float32),
                                                                                      np.ones(w, np.float32))]]),
    'narrow': _chain(1, (5, 9, 1), OPS),
    'odd': _chain(2, (19, 37, 100, 7, 24, 2), OPS[1:]),
}


def _numpy(steps, x):
    "The chain in float64 NumPy, NaN-propagating clamps as ONNX Runtime's."
    v = x.astype(np.float64)
    for s in steps:
        if isinstance(s, Dense): v = v @ s.W.astype(np.float64) + s.b
        elif s.kind == 'sub': v = v - s.c
        elif s.kind == 'div': v = v / s.c
        elif s.kind == 'mul': v = v * s.c
        elif s.kind == 'add': v = v + s.c
        elif s.kind == 'min': v = np.where(v > s.c, s.c, v)
        elif s.kind == 'max': v = np.where(v < s.c, s.c, v)
        elif s.kind == 'clip': v = np.where(v > s.c2, s.c2, np.where(v < s.c, s.c, v))
        elif s.kind == 'relu': v = np.where(v < 0, 0, v)
        elif s.kind == 'tanh': v = np.tanh(v)
        elif s.kind == 'sigmoid': v = 1 / (1 + np.exp(-v))
        elif s.kind == 'elu': v = np.where(v > 0, v, s.alpha * (np.exp(v) - 1))
    return v


def _run(kernel, dims, x, flags, tmp):
    "(kernel compiled, one-row outputs, batch outputs) of `kernel` built with `flags`."
    Path(tmp, 'kernel.h').write_text(kernel); Path(tmp, 'main.c').write_text(DRIVER)
    b = subprocess.run(['cc', *flags, f'-DOBS={dims[0]}', f'-DACT={dims[1]}', '-std=gnu11', '-Wall', 'main.c', '-lm',
                        '-o', 'k'], cwd=tmp, capture_output=True, text=True)
    assert b.returncode == 0 and 'warning' not in b.stderr, b.stderr[-2000:]
    r = subprocess.run([str(Path(tmp, 'k'))], input=np.int32(len(x)).tobytes() + x.astype(np.float32).tobytes(),
                       capture_output=True)
    assert r.returncode == 0, r.stderr
    y = np.frombuffer(r.stdout, np.float32).reshape(2, len(x), dims[1])
    return r.stderr.decode(), y[0], y[1]


def _inputs(obs):
    x = np.random.default_rng(7).normal(size=(25, obs)).astype(np.float32) * 2  # 4 six-row tiles and one row
    x[3, obs - 1] = np.nan
    return x


@pytest.mark.parametrize('heap', [False, True], ids=['stack scratch', 'heap scratch'])
@pytest.mark.parametrize('chain', list(CHAINS))
def test_every_kernel_computes_the_chain(chain, heap, tmp_path, monkeypatch):
    steps, dims = CHAINS[chain]
    if heap: monkeypatch.setattr(c_kernel, 'STACK_SCRATCH_MAX', 0)
    kernel = c_kernel._kernels(steps, dims)
    assert ('aligned_alloc' in kernel) == heap
    x = _inputs(dims[0])
    ref = _numpy(steps, x)
    bits = {}
    for name in RUNNABLE:
        (tmp_path/name).mkdir()
        built, one, batch = _run(kernel, dims, x, BUILDS[name], tmp_path/name)
        assert built == name.split(',')[0], (built, name)
        assert one.tobytes() == batch.tobytes(), name  # the batch kernel gives the one-row kernel's bits
        assert np.isnan(one[3]).all() and np.isfinite(np.delete(one, 3, 0)).all(), name  # NaN in, NaN out
        err = np.abs(np.delete(one, 3, 0) - np.delete(ref, 3, 0)).max()
        assert err < 1e-4, (name, err)
        bits[name] = one
    for family in SAME_BITS:
        assert len({bits[n].tobytes() for n in family if n in bits}) <= 1, family
    fused = [bits[n] for n in ('avx512', 'avx2+fma', 'portable C, FMA') if n in bits]
    for y in fused[1:]: assert np.abs(np.delete(y - fused[0], 3, 0)).max() <= 2.5e-7  # an ulp or two of values <= 2


def test_the_kernel_is_chosen_by_the_flags_and_portable_c_by_a_macro():
    kernel = c_kernel._kernels(*CHAINS['hopper'])
    prelude = '\n'.join(c_kernel.MAYBE_UNUSED) + '\n'  # the unused-helper macro comes first, then the ISA chain
    assert kernel.startswith(prelude)
    kernel = kernel[len(prelude):]
    guards = [l for l in kernel.splitlines() if l.startswith(('#if', '#elif', '#else', '#endif'))]
    assert guards == ['#if !defined(PPO_POLICY_PORTABLE) && defined(__AVX512F__)',
                      '#elif !defined(PPO_POLICY_PORTABLE) && defined(__AVX2__) && defined(__FMA__)',
                      '#elif !defined(PPO_POLICY_PORTABLE) && defined(__SSE2__)',
                      '#elif !defined(PPO_POLICY_PORTABLE) && defined(__ARM_NEON) && defined(__aarch64__)', '#else',
                      '#endif']
    # the observation's last partial vector is a masked load: no copy into a buffer, no failed store forwarding
    assert '_mm512_maskz_loadu_ps(0x7ff, x + 0)' in kernel and 'memcpy(u, x' not in kernel
