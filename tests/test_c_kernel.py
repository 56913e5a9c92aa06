"""The generated C kernel (`export.c_kernel.kernel_source`) under every instruction set this machine runs: random chains
(wide and narrow layers, every elementwise op, scalar and vector constants) against float64 NumPy, the batch kernel
giving the one-row kernel's bits, AVX-512 and AVX2 giving the same bits (as SSE2 and portable C without FMA do; portable
C with FMA within an ulp: GCC folds a saturated tanh without fusing), a NaN observation coming out NaN (never clamped
into a plausible action), on stack and heap scratch."""
import shutil, subprocess
from pathlib import Path
import numpy as np, pytest
from ppo_trt.export import c_kernel
from ppo_trt.export.onnx_graph import Dense, Elementwise, Norm, Cell, Recurrent

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
NEW_OPS = [  # issue 36: the activations torch exports, LayerNorm's normalisation
    [lambda rng, w: Elementwise('leakyrelu', alpha=0.1)],
    [lambda rng, w: Norm(1e-5), lambda rng, w: Elementwise('mul', rng.uniform(0.5, 1.5, w).astype(np.float32)),
     lambda rng, w: Elementwise('selu', c=np.float32(1.0507), alpha=1.6733)],
    [lambda rng, w: Elementwise('silu')],
    [lambda rng, w: Elementwise('softplus')],
    [lambda rng, w: Elementwise('softplus', c=np.float32(1.5)), lambda rng, w: Elementwise('elu', alpha=1.0)],
]
CHAINS = {  # the Hopper shape, a narrow input and a 1-wide head, odd widths with every op kind
    'hopper': _chain(0, (11, 64, 64, 3), [OPS[0], OPS[0], [lambda rng, w: Elementwise('clip', -np.ones(w, np.float32),
                                                                                      np.ones(w, np.float32))]]),
    'narrow': _chain(1, (5, 9, 1), OPS),
    'odd': _chain(2, (19, 37, 100, 7, 24, 2), OPS[1:]),
    'new ops': _chain(3, (13, 40, 21, 64, 5, 9, 3), NEW_OPS),
    'norm first': ([Norm(1e-3), Dense(np.eye(6, 17, dtype=np.float32), np.zeros(17, np.float32)), Norm(1e-5),
                    Elementwise('silu')], (6, 17)),
}


def _recurrent(seed, kind, lbr, obs, hidden, act):
    "A random `Recurrent`: an encoder, one GRU / LSTM cell, a head; in [obs | h (| c)], out [action | h' (| c')]."
    rng = np.random.default_rng(seed)
    w = lambda a, b: (rng.normal(size=(a, b)) / np.sqrt(a)).astype(np.float32)
    e, g = 12, 2 if kind == 'gru' else 4
    b = lambda n: rng.normal(size=n).astype(np.float32) * 0.3
    cell = (Cell(kind, hidden, Dense(w(e + hidden, g * hidden), b(g * hidden))) if kind == 'lstm' else
            Cell(kind, hidden, Dense(w(e + hidden, g * hidden), b(g * hidden)), Dense(w(e, hidden), b(hidden)),
                 Dense(w(hidden, hidden), b(hidden)), bool(lbr)))
    out = [('action', 0, act), ('h', act, hidden)] + ([('c', act + hidden, hidden)] if kind == 'lstm' else [])
    prog = Recurrent([Dense(w(obs, e), np.zeros(e, np.float32)), Elementwise('tanh')], cell,
                     [Dense(w(hidden, 16), np.zeros(16, np.float32)), Elementwise('elu'), Dense(w(16, act),
                      np.zeros(act, np.float32))], (0, obs), obs, obs + hidden if kind == 'lstm' else -1, out)
    return prog, (obs + hidden * (2 if kind == 'lstm' else 1), act + hidden * (2 if kind == 'lstm' else 1))


CHAINS.update({'gru (linear before reset)': _recurrent(4, 'gru', 1, 7, 9, 2),
               'gru': _recurrent(5, 'gru', 0, 5, 20, 3), 'lstm': _recurrent(6, 'lstm', 0, 11, 8, 4),
               'gru, 5 units': _recurrent(7, 'gru', 1, 3, 5, 1)})  # narrow layers: dot products


def _numpy(steps, x):
    "The chain (or `Recurrent`) in float64 NumPy, NaN-propagating clamps as ONNX Runtime's."
    if isinstance(steps, Recurrent): return _numpy_recurrent(steps, x)
    v = x.astype(np.float64)
    for s in steps:
        if isinstance(s, Dense): v = v @ s.W.astype(np.float64) + s.b
        elif isinstance(s, Norm):
            d = v - v.mean(1, keepdims=True)
            v = d / np.sqrt((d * d).mean(1, keepdims=True) + s.eps)
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
        elif s.kind == 'leakyrelu': v = np.where(v >= 0, v, s.alpha * v)
        elif s.kind == 'selu': v = np.where(v > 0, s.c * v, s.c * (s.alpha * np.exp(v) - s.alpha))
        elif s.kind == 'silu': v = v / (1 + np.exp(-v))
        elif s.kind == 'softplus': v = np.where(v > (np.inf if s.c is None else s.c), v, np.logaddexp(0, v))
    return v


def _numpy_recurrent(p, x):
    "One step of `Recurrent` `p` on packed rows `x`, in float64."
    H, E = p.cell.hidden, p.x_dim
    sig = lambda v: 1 / (1 + np.exp(-v))
    h = x[:, p.h_in:p.h_in + H].astype(np.float64)
    xh = np.concatenate([_numpy(p.encoder, x[:, p.obs[0]:p.obs[1]]), h], 1)
    g = xh @ p.cell.dense.W.astype(np.float64) + p.cell.dense.b
    part = lambda k: g[:, k * H:(k + 1) * H]
    if p.cell.kind == 'lstm':
        c = sig(part(2)) * x[:, p.c_in:p.c_in + H] + sig(part(0)) * np.tanh(part(3))
        new = dict(h=sig(part(1)) * np.tanh(c), c=c)
    else:
        dense = lambda d, v: v @ d.W.astype(np.float64) + d.b
        r = sig(part(1))
        n = dense(p.cell.dense_x, xh[:, :E]) + (r * dense(p.cell.dense_h, h) if p.cell.linear_before_reset else
                                                  dense(p.cell.dense_h, r * h))
        new = dict(h=(1 - sig(part(0))) * np.tanh(n) + sig(part(0)) * h)
    new['action'] = _numpy(p.head, new['h'])
    return np.concatenate([new[k] for k, _, _ in p.out], 1)


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


def _bits(y):
    "`y`'s bytes, every NaN made one NaN: which NaN an operation returns (its sign, payload) is the compiler's."
    return np.where(np.isnan(y), np.float32(np.nan), y).tobytes()


def _inputs(obs):
    x = np.random.default_rng(7).normal(size=(25, obs)).astype(np.float32) * 2  # 4 six-row tiles and one row
    x[3, obs - 1] = np.nan
    return x


@pytest.mark.parametrize('heap', [False, True], ids=['stack scratch', 'heap scratch'])
@pytest.mark.parametrize('chain', list(CHAINS))
def test_every_kernel_computes_the_chain(chain, heap, tmp_path, monkeypatch):
    steps, dims = CHAINS[chain]
    if heap and isinstance(steps, Recurrent): pytest.skip('a recurrent kernel keeps its scratch on the stack')
    if heap: monkeypatch.setattr(c_kernel, 'STACK_SCRATCH_MAX', 0)
    kernel = c_kernel.kernel_source(steps, dims)
    assert ('aligned_alloc' in kernel) == heap
    x = _inputs(dims[0])
    ref = _numpy(steps, x)
    bits = {}
    for name in RUNNABLE:
        (tmp_path/name).mkdir()
        built, one, batch = _run(kernel, dims, x, BUILDS[name], tmp_path/name)
        assert built == name.split(',')[0], (built, name)
        assert _bits(one) == _bits(batch), name  # the batch kernel gives the one-row kernel's bits
        acts = slice(0, steps.out[0][2]) if isinstance(steps, Recurrent) else slice(None)  # a state keeps its columns
        assert np.isnan(one[3, acts]).all() and np.isfinite(np.delete(one, 3, 0)).all(), name  # NaN in, NaN out
        assert np.array_equal(np.isnan(one), np.isnan(ref)), name
        err = np.abs(np.delete(one, 3, 0) - np.delete(ref, 3, 0)).max()
        assert err < 1e-4, (name, err)
        bits[name] = one
    for family in SAME_BITS:
        assert len({_bits(bits[n]) for n in family if n in bits}) <= 1, family
    fused = [bits[n] for n in ('avx512', 'avx2+fma', 'portable C, FMA') if n in bits]
    for y in fused[1:]: assert np.abs(np.delete(y - fused[0], 3, 0)).max() <= 2.5e-7  # an ulp or two of values <= 2


def test_the_kernel_is_chosen_by_the_flags_and_portable_c_by_a_macro():
    kernel = c_kernel.kernel_source(*CHAINS['hopper'])
    prelude = '\n'.join([*c_kernel.MAYBE_UNUSED, '#include <stdint.h>', *c_kernel.PPO_FMA]) + '\n'  # then the ISAs
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
