"""Hopper-v4 on the GPU through MuJoCo XLA (MJX, JAX), against the CPU steppers on the same machine (the GPU kit's
`mjx` step, tools/gpu_session.sh quick mjx). gymnasium's hopper.xml (RK4, 4 substeps an env step) is put on the device
once; `num_envs` copies start from gymnasium's reset noise (set on the host: no device compile); one jitted env step
(uniform random actions in [-1, 1] drawn on the device from a key, physics only: no observations, rewards or resets)
is driven `--steps` times from Python. The sizes run in ascending order (1 024, 4 096, 16 384, 65 536 by default) and
the first one doubles as the parity check: env 0 of that batch against MuJoCo's C (float64) from the same state with the
same actions, so parity costs no compile of its own. Each size is compiled once, through JAX's persistent compilation
cache in --cache-dir (on the machine, outside $OUT: a second call while the machine is warm loads what the first one
compiled), and a size starts only when the time it is expected to need (the last compile plus its runs scaled by size)
is left. The CPU rows: `mujoco.batch` (MuJoCo's threaded C batch, physics only) and `MujocoBatched` (ppo_trt's
gymnasium-exact Hopper step: observations, rewards, resets) on every core, timed first (seconds). The record (`--out`)
is rewritten whole after every row, so a run killed at its limit keeps the rows it finished.
MuJoCo Warp (MJX-Warp) is not here: warp-lang's wheel (149 MB) is over what the device tool carries.
Usage: python tools/gpu_mjx.py --out mjx.json [--sizes 1024,4096,16384,65536] [--cache-dir DIR] [--budget-s 140]"""
import argparse, os, sys, time
from pathlib import Path

ENV_ID, FRAME_SKIP, RESET_NOISE = 'Hopper-v4', 4, 5e-3
T0 = time.perf_counter()
TUNED_ITERATIONS, TUNED_LS_ITERATIONS = 4, 8  # GPU-minded solver settings: each MJX iteration is a serial step
PARITY_STEPS = 20  # env steps of env 0 checked against MuJoCo's C at the first size


def hopper_xml():
    "gymnasium's hopper.xml (what Hopper-v4 loads)."
    import gymnasium
    return Path(gymnasium.__file__).parent/'envs'/'mujoco'/'assets'/'hopper.xml'


def versions():
    "What ran: jax, its devices, mujoco, mujoco-mjx, the GPU."
    import importlib.metadata as md, jax, mujoco
    v = dict(jax=jax.__version__, mujoco=mujoco.__version__, backend=jax.default_backend(),
             devices=[str(d) for d in jax.devices()], cpus=len(os.sched_getaffinity(0)))
    try: v['mujoco_mjx'] = md.version('mujoco-mjx')
    except md.PackageNotFoundError: v['mujoco_mjx'] = None
    d = jax.devices()[0]
    v['device_kind'] = getattr(d, 'device_kind', str(d))
    return v


class Record:
    "The JSON record, rewritten after every change."
    def __init__(self, path, **head): self.path, self.data = Path(path), dict(head, rows=[], errors=[])
    def write(self):
        from ppo_trt.core.files import save_json  # atomic: a kill mid-write leaves the last whole record
        save_json(self.path, self.data)
    def row(self, **r):
        self.data['rows'].append(r); self.data.pop('running', None); self.write(); say(row_line(r))
    def running(self, what):
        "Say what runs now, in the record too: a session killed at its limit keeps what it was doing, and since when."
        self.data['running'] = dict(what=what, since_s=round(time.perf_counter() - T0, 1)); self.write()
    def error(self, what, e):
        self.data.pop('running', None)
        self.data['errors'].append(dict(what=what, error=f'{type(e).__name__}: {e}'[:500])); self.write()
        say(f'failed: {what}: {type(e).__name__}: {str(e)[:300]}')


def say(msg): print(msg, flush=True)


def row_line(r):
    "One line per row, as the session's summary greps it."
    extra = f", compile {r['compile_s']:.1f} s" if r.get('compile_s') is not None else ''
    return (f"mjx {r['impl']} at {r['num_envs']:,} envs on {r['device']}: {r['env_steps_per_s']:.3g} env steps/s "
            f"({r['physics_steps_per_s']:.3g} physics steps/s{extra})")


def plan_sizes(text):
    "The env counts of a comma-separated list, each once, in ascending order (the cheapest first: rows come early)."
    sizes = sorted({int(x) for x in text.split(',') if x.strip()})
    if any(n < 1 for n in sizes): raise SystemExit(f'gpu_mjx: env counts must be >= 1, got {text!r}')
    return sizes


def expected_s(n, done):
    "Seconds size `n` is expected to take, from the sizes `done` [(n, compile_s, run_s)]: None before the first."
    if not done: return None
    m, compile_s, run_s = done[-1]
    return compile_s + run_s * max(1.0, n / m)  # compile time barely grows with the batch; the run at most linearly


def cache_dir(requested, out):
    "The persistent compilation cache's folder: `requested`, never inside the folder of `out` (what comes back)."
    d, o = Path(requested).resolve(), Path(out).resolve().parent
    if d == o or o in d.parents:
        raise SystemExit(f'gpu_mjx: --cache-dir {requested} is inside {o}, which the device tool brings back: keep the '
                         'cache on the machine (the kit uses $KIT_DIR/jax_cache)')
    return d


def use_cache(path):
    "Point JAX's persistent compilation cache at `path`, every compile kept; {setting: value or why not}."
    import jax
    path.mkdir(parents=True, exist_ok=True)
    done = {}
    for k, v in (('jax_compilation_cache_dir', str(path)), ('jax_persistent_cache_min_compile_time_secs', 0.0),
                 ('jax_persistent_cache_min_entry_size_bytes', 0)):
        try: jax.config.update(k, v); done[k] = v
        except Exception as e: done[k] = f'not set: {type(e).__name__}: {e}'[:200]
    return done


def cache_entries(path):
    "Files in the cache folder (a compile that added none was loaded from it)."
    return sum(1 for p in Path(path).rglob('*') if p.is_file()) if Path(path).is_dir() else 0


def mjx_step(mx):
    "The one jitted function every size uses: (data, key) -> data after one env step of every env, actions from key."
    import jax
    from mujoco import mjx
    def env_step(d, a):
        return jax.lax.fori_loop(0, FRAME_SKIP, lambda _, x: mjx.step(mx, x), d.replace(ctrl=a))
    batched = jax.vmap(env_step)
    def step(d, key):
        return batched(d, jax.random.uniform(key, d.ctrl.shape, minval=-1.0, maxval=1.0))
    return jax.jit(step)


def host_batch(m, mx, n, seed):
    "`n` MJX datas from gymnasium's reset noise, built with numpy and put on the device whole (nothing compiled)."
    import jax, mujoco, numpy as np
    from mujoco import mjx
    rng = np.random.default_rng(seed)
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    one = mjx.put_data(m, d)
    many = jax.tree_util.tree_map(lambda x: np.broadcast_to(np.asarray(x), (n, *np.shape(x))).copy(), one)
    q = (m.qpos0 + rng.uniform(-RESET_NOISE, RESET_NOISE, (n, m.nq))).astype(np.asarray(one.qpos).dtype)
    v = rng.uniform(-RESET_NOISE, RESET_NOISE, (n, m.nv)).astype(np.asarray(one.qvel).dtype)
    return jax.device_put(many.replace(qpos=q, qvel=v))


def parity_of(m, d0, d1, keys, n):
    "Env 0 after len(keys) env steps, MJX (d0 -> d1) against MuJoCo's C from the same state with the same actions."
    import jax, mujoco, numpy as np
    d = mujoco.MjData(m)
    d.qpos[:], d.qvel[:] = np.asarray(d0.qpos[0], np.float64), np.asarray(d0.qvel[0], np.float64)
    for k in keys:  # the actions the jitted step drew: the same key, shape and bounds give the same numbers
        d.ctrl[:] = np.asarray(jax.random.uniform(k, (n, m.nu), minval=-1.0, maxval=1.0))[0]
        mujoco.mj_step(m, d, nstep=FRAME_SKIP)
    return dict(env_steps=len(keys), max_abs_qpos=float(np.abs(np.asarray(d1.qpos[0]) - d.qpos).max()),
                max_abs_qvel=float(np.abs(np.asarray(d1.qvel[0]) - d.qvel).max()), dtype=str(d1.qpos.dtype))


def time_mjx(m, mx, step, n, steps, repeats, cache, seed=0, parity_steps=0):
    "{compile_s, cached, run_s, parity?}: `step` compiled for `n` envs, then `steps` env steps timed, best of repeats."
    import jax
    d, key = host_batch(m, mx, n, seed), jax.random.PRNGKey(seed + 1)
    keys = list(jax.random.split(key, max(steps, parity_steps)))
    jax.block_until_ready(d)
    before, t0 = cache_entries(cache), time.perf_counter()
    run = step.lower(d, keys[0]).compile()
    r = dict(compile_s=time.perf_counter() - t0, cached=cache_entries(cache) == before)
    x = d
    for k in keys[:max(1, parity_steps)]: x = run(x, k)  # the first calls: transfers and allocations, untimed
    jax.block_until_ready(x)
    if parity_steps: r['parity'] = parity_of(m, d, x, keys[:parity_steps], n)
    best = float('inf')
    for _ in range(repeats):
        x, t0 = d, time.perf_counter()
        for k in keys[:steps]: x = run(x, k)
        jax.block_until_ready(x)
        best = min(best, time.perf_counter() - t0)
    r['run_s'] = best
    return r


def time_cpu(n, steps, threads, seed=0):
    "Rows for MuJoCo's threaded C batch (physics only) and ppo_trt's MujocoBatched (the whole gymnasium step)."
    import mujoco, numpy as np
    from mujoco import batch
    m = mujoco.MjModel.from_xml_path(str(hopper_xml()))
    rng = np.random.default_rng(seed)
    sims = batch.Batch(m, n, threads)
    qpos, qvel, ctrl = map(sims.bind, ('qpos', 'qvel', 'ctrl'))
    qpos[:] = m.qpos0 + rng.uniform(-RESET_NOISE, RESET_NOISE, (n, m.nq))
    qvel[:] = rng.uniform(-RESET_NOISE, RESET_NOISE, (n, m.nv))
    acts = rng.uniform(-1, 1, (steps, n, m.nu))
    t0 = time.perf_counter()
    for a in acts: ctrl[:] = a; sims.step(nstep=FRAME_SKIP)
    rows = [('mujoco.batch (C, threads), physics only', time.perf_counter() - t0)]
    try:
        import torch
        from ppo_trt.envs.batched.mujoco import MujocoBatched
        env = MujocoBatched(ENV_ID, n, seed=seed, num_threads=threads)
        env.reset()
        ta = torch.from_numpy(acts.astype(np.float32))
        t0 = time.perf_counter()
        for a in ta: env.step(a)
        rows.append(('MujocoBatched (gymnasium step: obs, reward, resets)', time.perf_counter() - t0))
    except Exception as e:  # the physics row stands alone; the record says why the other is missing
        rows.append(('MujocoBatched', e))
    return rows


def cpu_rows(rec, sizes, steps, left, budget_s):
    "The CPU steppers' rows, each size while time is left."
    threads = len(os.sched_getaffinity(0))
    for n in sizes:
        if left() < 5:
            rec.error(f'CPU at {n} envs', TimeoutError(f'not run: {left():.0f} s of the {budget_s:.0f} s left'))
            continue
        try:
            for impl, t in time_cpu(n, steps, min(threads, n)):
                if isinstance(t, Exception): rec.error(f'{impl} at {n} envs', t); continue
                rec.row(impl=impl, num_envs=n, device=f'CPU, {min(threads, n)} threads', compile_s=None, run_s=t,
                        env_steps_per_s=n * steps / t, physics_steps_per_s=n * steps * FRAME_SKIP / t)
        except Exception as e: rec.error(f'CPU at {n} envs', e)


def mjx_rows(rec, m, sizes, a, left, label, parity=False):
    "MJX rows of model `m` at `sizes` (ascending), each when the time it is expected to need is left."
    from mujoco import mjx
    mx = mjx.put_model(m)
    step, done = mjx_step(mx), []
    for n in sizes:
        need = expected_s(n, done)
        if left() < 20 or (need is not None and need > left()):
            why = f'{left():.0f} s of the {a.budget_s:.0f} s left' + (f', it needs about {need:.0f} s' if need else '')
            rec.error(f'{label} at {n} envs', TimeoutError(f'not run: {why}'))
            continue
        try:
            rec.running(f'{label} at {n} envs')
            r = time_mjx(m, mx, step, n, a.steps, a.repeats, a.cache_dir,
                         parity_steps=PARITY_STEPS if parity else 0)
            if parity:  # the first size that ran is the check
                par = rec.data['parity'] = r.pop('parity')
                parity = False
                rec.write()
                say(f"mjx parity vs MuJoCo C, env 0 of {n:,} after {par['env_steps']} env steps: "
                    f"max|dqpos| {par['max_abs_qpos']:.2e}, max|dqvel| {par['max_abs_qvel']:.2e}")
            rec.row(impl=label, num_envs=n, device=rec.data['versions']['device_kind'], compile_s=r['compile_s'],
                    compile_cached=r['cached'], run_s=r['run_s'], env_steps_per_s=n * a.steps / r['run_s'],
                    physics_steps_per_s=n * a.steps * FRAME_SKIP / r['run_s'])
            done.append((n, r['compile_s'], r['run_s'] * (a.repeats + 1)))  # the untimed first calls too
        except Exception as e: rec.error(f'{label} at {n} envs', e)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--out', required=True, help='the JSON record, rewritten after every row')
    p.add_argument('--sizes', default='1024,4096,16384,65536', help='MJX env counts (run in ascending order)')
    p.add_argument('--steps', type=int, default=20, help='env steps per timed run (x4 physics steps)')
    p.add_argument('--repeats', type=int, default=2)
    p.add_argument('--cpu-sizes', default='1024,4096', help='env counts of the CPU steppers')
    p.add_argument('--cpu-steps', type=int, default=20)
    p.add_argument('--tuned-sizes', default='', help='env counts for MJX with the solver cut to '
                   f'{TUNED_ITERATIONS} iterations and {TUNED_LS_ITERATIONS} line-search steps (not gymnasium physics)')
    p.add_argument('--cache-dir', default=os.path.join(os.environ.get('KIT_DIR', '/tmp/ppo_trt_kit'), 'jax_cache'),
                   help="JAX's persistent compilation cache, on this machine (default: $KIT_DIR/jax_cache)")
    p.add_argument('--budget-s', type=float, default=140, help='no size starts unless the time it needs is left')
    a = p.parse_args(argv)
    t_start = time.perf_counter()
    left = lambda: a.budget_s - (time.perf_counter() - t_start)
    sizes, tuned_sizes = plan_sizes(a.sizes), plan_sizes(a.tuned_sizes)
    a.cache_dir = cache_dir(a.cache_dir, a.out)
    os.environ.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')
    rec = Record(a.out, env_id=ENV_ID, model='gymnasium hopper.xml', frame_skip=FRAME_SKIP, steps=a.steps,
                 repeats=a.repeats, actions='uniform random in [-1, 1]', sizes=sizes)
    rec.write()
    cpu_rows(rec, plan_sizes(a.cpu_sizes), a.cpu_steps, left, a.budget_s)
    try:
        import jax, mujoco
        from mujoco import mjx
    except Exception as e:
        rec.data['skipped'] = f'MJX does not import here: {type(e).__name__}: {e}'
        rec.write(); say(f"mjx skipped: {rec.data['skipped']}")
        mjx = None
    if mjx is not None:
        rec.data['versions'] = versions()
        rec.data['compilation_cache'] = dict(dir=str(a.cache_dir), entries_before=cache_entries(a.cache_dir),
                                             settings=use_cache(a.cache_dir))
        rec.write()
        say(f"mjx: jax {rec.data['versions']['jax']} on {rec.data['versions']['devices']}, "
            f"mujoco {rec.data['versions']['mujoco']}, mujoco-mjx {rec.data['versions']['mujoco_mjx']}, "
            f"compilation cache {a.cache_dir} ({rec.data['compilation_cache']['entries_before']} files)")
        m = mujoco.MjModel.from_xml_path(str(hopper_xml()))
        try: mjx_rows(rec, m, sizes, a, left, 'MJX (JAX), physics only', parity=True)
        except Exception as e: rec.error('put_model', e)
        if tuned_sizes:
            tuned = mujoco.MjModel.from_xml_path(str(hopper_xml()))
            rec.data['solver'] = dict(gymnasium=dict(iterations=m.opt.iterations, ls_iterations=m.opt.ls_iterations),
                                      tuned=dict(iterations=TUNED_ITERATIONS, ls_iterations=TUNED_LS_ITERATIONS))
            tuned.opt.iterations, tuned.opt.ls_iterations = TUNED_ITERATIONS, TUNED_LS_ITERATIONS
            try: mjx_rows(rec, tuned, tuned_sizes, a, left, f'MJX (JAX), physics only, solver cut to '
                          f'{TUNED_ITERATIONS} iterations / {TUNED_LS_ITERATIONS} line search (not gymnasium physics)')
            except Exception as e: rec.error('put_model (tuned)', e)
    rec.data.pop('running', None); rec.write()
    say(f"wrote {a.out} ({len(rec.data['rows'])} rows, {len(rec.data['errors'])} errors) in "
        f"{time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == '__main__': sys.exit(main())
