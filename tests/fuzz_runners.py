"""Fuzz one backend's checked call `runner(obs)` and hot path `runner.run(obs)` with random inputs;
print the counts as JSON.

Run as a script (`python tests/fuzz_runners.py RUN_DIR BACKEND N SEED`) in its own process, so a crash signal is seen
by the caller as a return code instead of taking the test session down.
Every contiguous input is placed so that its last byte is the last byte before a page with no access rights: a kernel
that reads one byte past the input faults at once.

Inputs are drawn from a seeded NumPy generator rather than hypothesis: shrinking cannot help once the process is dead,
and the page-edge placement is easier to control by hand.
"""
import ctypes, faulthandler, json, mmap, sys
import numpy as np

PAGE = mmap.PAGESIZE
_libc = ctypes.CDLL(None, use_errno=True)
_libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
_keep = []  # the mappings behind live arrays


def at_page_end(arr, shift=0):
    "A copy of contiguous `arr` ending `shift` bytes before a PROT_NONE page (`shift` > 0 also misaligns it)."
    n = arr.nbytes + shift
    pages = -(-max(n, 1) // PAGE) + 1
    m = mmap.mmap(-1, pages * PAGE)
    anchor = ctypes.c_char.from_buffer(m)
    guard = ctypes.addressof(anchor) + (pages - 1) * PAGE
    del anchor
    if _libc.mprotect(guard, PAGE, 0) != 0: raise OSError(ctypes.get_errno(), 'mprotect failed')
    out = np.frombuffer(m, arr.dtype, count=arr.size, offset=(pages - 1) * PAGE - n).reshape(arr.shape)
    out[...] = arr
    _keep.append(m)
    if len(_keep) > 64: _keep.pop(0)
    return out


def random_input(rng, pool, obs_dim):
    "(input, what it is) for one fuzz case; `pool` holds real observations."
    rows = int(rng.choice([0, 1, 1, 1, 2, 3, 5, 7, 8, 13, 64, 65, 300]))
    width = obs_dim if rng.random() < 0.75 else int(rng.choice([1, 5, obs_dim - 1, obs_dim + 1, 2 * obs_dim]))
    base = pool[rng.integers(0, len(pool), size=max(rows, 1))][:rows]
    if width != obs_dim: base = rng.normal(size=(rows, width)).astype(np.float32)
    # large, still finite or inf
    if rng.random() < 0.15: base = (base * rng.choice([1e3, 1e20, 3e38])).astype(np.float32)
    if rng.random() < 0.25 and base.size:  # NaN or inf somewhere
        base = base.copy(); base.flat[rng.integers(base.size)] = rng.choice([np.nan, np.inf, -np.inf])
    kind = rng.choice(['plain', 'dtype', 'swapped', 'fortran', 'strided', 'columns', 'readonly', 'unaligned', 'ndim',
                       'list', 'scalar', 'empty', 'object'],
                      p=[.31, .1, .07, .07, .07, .05, .07, .07, .07, .05, .02, .03, .02])
    if kind == 'plain': return at_page_end(base), kind
    if kind == 'dtype':
        return at_page_end(base.astype(rng.choice([np.float64, np.float16, np.int32, np.int8, np.uint8, np.bool_,
                                                   np.complex64]))), kind
    if kind == 'swapped': return at_page_end(base.astype(base.dtype.newbyteorder('>'))), kind
    if kind == 'fortran': return np.asfortranarray(base), kind
    if kind == 'strided': return np.repeat(base, 2, axis=0)[::2], kind
    if kind == 'columns': return np.repeat(base, 2, axis=1)[:, ::2], kind
    if kind == 'readonly':
        x = at_page_end(base); x.flags.writeable = False; return x, kind
    if kind == 'unaligned': return at_page_end(base, shift=int(rng.integers(1, 4))), kind
    if kind == 'ndim':
        return at_page_end(base.reshape((1, *base.shape)) if rng.random() < .5 else base.reshape(-1)), kind
    if kind == 'list': return base.tolist(), kind
    if kind == 'scalar': return np.float32(1.0), kind
    if kind == 'empty': return at_page_end(np.zeros((0, width), np.float32)), kind
    return np.array(base.tolist(), dtype=object), kind


def valid(x, obs_dim):
    "Whether the checked call must accept `x`: a float32 (native byte order) [B >= 1, obs_dim] array of finite values."
    return (isinstance(x, np.ndarray) and x.dtype == np.float32 and x.ndim == 2 and x.shape[1] == obs_dim
            and x.shape[0] >= 1 and bool(np.isfinite(x).all()))


def fuzz(run_dir, name, n, seed):
    "Counts of what `runner(obs)` and `runner.run(obs)` did with `n` random inputs; mismatches and wrong errors listed."
    from ppo_trt.backends import registry as B
    from ppo_trt.core.files import BadInputError
    runner, ref = B.load(name, run_dir), B.load('ort', run_dir)
    pool = np.load(f'{run_dir}/export_obs.npy')
    rng, d = np.random.default_rng(seed), runner.obs_dim
    counts = dict(inputs=0, checked_matched=0, checked_refused=0, run_returned=0, run_raised=0, kinds={})
    problems = []
    for i in range(n):
        x, kind = random_input(rng, pool, d)
        counts['inputs'] += 1; counts['kinds'][kind] = counts['kinds'].get(kind, 0) + 1
        good = valid(x, d)
        try:
            out = runner(x)
            if not good: problems.append((i, kind, 'checked call accepted an invalid input'))
            else:
                want = ref(np.ascontiguousarray(x))
                if out.shape != want.shape or out.dtype != np.float32 or not np.abs(out - want).max() <= 1e-5:
                    problems.append((i, kind, f'checked call differs from ORT: {out.shape} {out.dtype}'))
                else: counts['checked_matched'] += 1
        except BadInputError as e:
            if good: problems.append((i, kind, f'valid input refused: {e}'))
            else: counts['checked_refused'] += 1
        except Exception as e:
            problems.append((i, kind, f'checked call raised {type(e).__name__} (not BadInputError): {e}'))
        try:
            out = runner.run(x)
            counts['run_returned'] += 1
            if good and x.flags.c_contiguous and x.flags.aligned and isinstance(out, np.ndarray):
                if (out.shape != (len(x), runner.act_dim)
                        or not np.abs(out - ref(np.ascontiguousarray(x))).max() <= 1e-5):
                    problems.append((i, kind, 'hot path differs from ORT on a valid input'))
        except Exception: counts['run_raised'] += 1
    return dict(counts, problems=[list(map(str, p)) for p in problems[:20]], n_problems=len(problems))


if __name__ == '__main__':
    faulthandler.enable()
    run_dir, name, n, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    print(json.dumps(fuzz(run_dir, name, n, seed)))
