"""Hopper-v4 on the GPU through MuJoCo XLA (MJX, JAX), against the CPU steppers on the same machine (the GPU kit's
`mjx` step, tools/gpu_session.sh quick mjx). gymnasium's hopper.xml (RK4, 4 substeps an env step) is put on the device
once, `num_envs` copies start from gymnasium's reset noise, and one jitted `lax.scan` steps them all `--steps` env steps
with uniform random actions in [-1, 1] (physics only: no observations, rewards or resets; the CPU rows say what they
include). Per size: the compile time and the best of `--repeats` timed runs. First a parity check: one env stepped by
MJX (float32) and by MuJoCo's C (float64) from the same state with the same actions. The CPU rows: `mujoco.batch`
(MuJoCo's threaded C batch, physics only) and `MujocoBatched` (ppo_trt's gymnasium-exact Hopper step: observations,
rewards, resets) on every core, timed first (seconds; MJX compiles for tens of seconds a size). The record
(`--out`) is rewritten after every row, so a time-out keeps what ran.
MuJoCo Warp (MJX-Warp) is not here: warp-lang's wheel (149 MB) is over what the device tool carries.
Usage: python tools/gpu_mjx.py --out mjx.json [--sizes 1024,8192,65536] [--budget-s 200]"""
import argparse, os, sys, time
from pathlib import Path

ENV_ID, FRAME_SKIP, RESET_NOISE = 'Hopper-v4', 4, 5e-3
T0 = time.perf_counter()
TUNED_ITERATIONS, TUNED_LS_ITERATIONS = 4, 8  # GPU-minded solver settings: each MJX iteration is a serial step


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


def mjx_rollout(mx, steps):
    "A jitted function (data, key) -> data: `steps` env steps of every env, random actions drawn on the device."
    import jax
    from mujoco import mjx
    def env_step(d, a):
        d = d.replace(ctrl=a)
        return jax.lax.fori_loop(0, FRAME_SKIP, lambda _, x: mjx.step(mx, x), d)
    batched = jax.vmap(env_step)
    def run(d, key):
        def body(d, k):
            a = jax.random.uniform(k, d.ctrl.shape, minval=-1.0, maxval=1.0)
            return batched(d, a), None
        return jax.lax.scan(body, d, jax.random.split(key, steps))[0]
    return jax.jit(run)


def mjx_batch(m, mx, n, seed):
    "`n` MJX datas, each from gymnasium's reset noise (uniform +-5e-3 on qpos and qvel)."
    import jax, jax.numpy as jp
    from mujoco import mjx
    key_q, key_v = jax.random.split(jax.random.PRNGKey(seed))
    qpos = jp.asarray(m.qpos0) + jax.random.uniform(key_q, (n, m.nq), minval=-RESET_NOISE, maxval=RESET_NOISE)
    qvel = jax.random.uniform(key_v, (n, m.nv), minval=-RESET_NOISE, maxval=RESET_NOISE)
    d0 = mjx.make_data(mx)
    return jax.vmap(lambda q, v: mjx.forward(mx, d0.replace(qpos=q, qvel=v)))(qpos, qvel)


def parity(m, mx, n_steps=20, seed=0):
    "Max |qpos| and |qvel| difference after `n_steps` env steps of one env: MJX float32 vs MuJoCo C float64."
    import jax, jax.numpy as jp, mujoco, numpy as np
    from mujoco import mjx
    rng = np.random.default_rng(seed)
    actions = rng.uniform(-1, 1, (n_steps, m.nu))
    d = mujoco.MjData(m)
    d.qpos[:] = m.qpos0 + rng.uniform(-RESET_NOISE, RESET_NOISE, m.nq)
    d.qvel[:] = rng.uniform(-RESET_NOISE, RESET_NOISE, m.nv)
    dx = mjx.put_data(m, d)
    step = jax.jit(lambda x, a: jax.lax.fori_loop(0, FRAME_SKIP, lambda _, y: mjx.step(mx, y), x.replace(ctrl=a)))
    for a in actions:
        d.ctrl[:] = a
        mujoco.mj_step(m, d, nstep=FRAME_SKIP)
        dx = step(dx, jp.asarray(a, jp.float32))
    return dict(env_steps=n_steps, max_abs_qpos=float(np.abs(np.asarray(dx.qpos) - d.qpos).max()),
                max_abs_qvel=float(np.abs(np.asarray(dx.qvel) - d.qvel).max()), dtype=str(dx.qpos.dtype))


def time_mjx(m, mx, n, steps, repeats, seed=0):
    "(compile s, best run s) of `steps` env steps of `n` envs."
    import jax
    d, key = mjx_batch(m, mx, n, seed), jax.random.PRNGKey(seed + 1)
    jax.block_until_ready(d)
    t0 = time.perf_counter()
    run = mjx_rollout(mx, steps).lower(d, key).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(run(d, key))  # first call: transfers and allocations
    best = float('inf')
    for r in range(repeats):
        t0 = time.perf_counter()
        out = run(d, jax.random.fold_in(key, r))
        jax.block_until_ready(out)
        best = min(best, time.perf_counter() - t0)
    return compile_s, best


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


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--out', required=True, help='the JSON record, rewritten after every row')
    p.add_argument('--sizes', default='1024,8192,65536', help='MJX env counts, in order')
    p.add_argument('--steps', type=int, default=100, help='env steps per timed run (x4 physics steps)')
    p.add_argument('--repeats', type=int, default=3)
    p.add_argument('--cpu-sizes', default='64,1024', help='env counts of the CPU steppers')
    p.add_argument('--cpu-steps', type=int, default=50)
    p.add_argument('--tuned-sizes', default='', help='env counts for MJX with the solver cut to '
                   f'{TUNED_ITERATIONS} iterations and {TUNED_LS_ITERATIONS} line-search steps (not gymnasium physics)')
    p.add_argument('--budget-s', type=float, default=200, help='no new size starts after this')
    a = p.parse_args(argv)
    t_start = time.perf_counter()
    left = lambda: a.budget_s - (time.perf_counter() - t_start)
    os.environ.setdefault('XLA_PYTHON_CLIENT_PREALLOCATE', 'false')
    rec = Record(a.out, env_id=ENV_ID, model='gymnasium hopper.xml', frame_skip=FRAME_SKIP, steps=a.steps,
                 actions='uniform random in [-1, 1]')
    threads = len(os.sched_getaffinity(0))
    for n in [int(x) for x in a.cpu_sizes.split(',') if x]:
        if left() < 5:
            rec.error(f'CPU at {n} envs', TimeoutError(f'not run: {left():.0f} s of the {a.budget_s:.0f} s left'))
            continue
        try:
            for impl, t in time_cpu(n, a.cpu_steps, min(threads, n)):
                if isinstance(t, Exception): rec.error(f'{impl} at {n} envs', t); continue
                rec.row(impl=impl, num_envs=n, device=f'CPU, {min(threads, n)} threads', compile_s=None, run_s=t,
                        env_steps_per_s=n * a.cpu_steps / t, physics_steps_per_s=n * a.cpu_steps * FRAME_SKIP / t)
        except Exception as e: rec.error(f'CPU at {n} envs', e)
    try:
        import jax, mujoco
        from mujoco import mjx
    except Exception as e:
        rec.data['skipped'] = f'MJX does not import here: {type(e).__name__}: {e}'
        rec.write(); say(f"mjx skipped: {rec.data['skipped']}")
        mjx = None
    if mjx is not None:
        rec.data['versions'] = versions(); rec.write()
        say(f"mjx: jax {rec.data['versions']['jax']} on {rec.data['versions']['devices']}, "
            f"mujoco {rec.data['versions']['mujoco']}, mujoco-mjx {rec.data['versions']['mujoco_mjx']}")
        m = mujoco.MjModel.from_xml_path(str(hopper_xml()))
        try:
            mx = mjx.put_model(m)
            par = rec.data['parity'] = parity(m, mx); rec.write()
            say(f"mjx parity vs MuJoCo C after {par['env_steps']} env steps: "
                f"max|dqpos| {par['max_abs_qpos']:.2e}, max|dqvel| {par['max_abs_qvel']:.2e}")
        except Exception as e: rec.error('put_model / parity', e); mx = None
        for n in [int(x) for x in a.sizes.split(',') if x] if mx is not None else []:
            if left() < 20:
                rec.error(f'MJX at {n} envs', TimeoutError(f'not run: {left():.0f} s of the {a.budget_s:.0f} s left'))
                continue
            try:
                rec.running(f'MJX at {n} envs'); compile_s, run_s = time_mjx(m, mx, n, a.steps, a.repeats)
                rec.row(impl='MJX (JAX), physics only', num_envs=n, device=rec.data['versions']['device_kind'],
                        compile_s=compile_s, run_s=run_s, env_steps_per_s=n * a.steps / run_s,
                        physics_steps_per_s=n * a.steps * FRAME_SKIP / run_s)
            except Exception as e: rec.error(f'MJX at {n} envs', e)
        sizes = [int(x) for x in a.tuned_sizes.split(',') if x] if mx is not None else []
        if sizes:
            tuned = mujoco.MjModel.from_xml_path(str(hopper_xml()))
            rec.data['solver'] = dict(gymnasium=dict(iterations=m.opt.iterations, ls_iterations=m.opt.ls_iterations),
                                      tuned=dict(iterations=TUNED_ITERATIONS, ls_iterations=TUNED_LS_ITERATIONS))
            tuned.opt.iterations, tuned.opt.ls_iterations = TUNED_ITERATIONS, TUNED_LS_ITERATIONS
            tmx = mjx.put_model(tuned)
        for n in sizes:
            what = f'MJX at {n} envs, solver {TUNED_ITERATIONS}/{TUNED_LS_ITERATIONS} iterations'
            if left() < 20:
                rec.error(what, TimeoutError(f'not run: {left():.0f} s of the {a.budget_s:.0f} s left'))
                continue
            try:
                rec.running(what); compile_s, run_s = time_mjx(tuned, tmx, n, a.steps, a.repeats)
                rec.row(impl=f'MJX (JAX), physics only, solver cut to {TUNED_ITERATIONS} iterations / '
                        f'{TUNED_LS_ITERATIONS} line search (not gymnasium physics)', num_envs=n,
                        device=rec.data['versions']['device_kind'], compile_s=compile_s, run_s=run_s,
                        env_steps_per_s=n * a.steps / run_s, physics_steps_per_s=n * a.steps * FRAME_SKIP / run_s)
            except Exception as e: rec.error(what, e)
    say(f"wrote {a.out} ({len(rec.data['rows'])} rows, {len(rec.data['errors'])} errors) in "
        f"{time.perf_counter() - t_start:.0f} s")
    return 0


if __name__ == '__main__': sys.exit(main())
