"""The record keeper and small checks of `tools/gpu_session.sh quick`.

quick.json (under $OUT) is rewritten after every step, so a session cut off at any point still brings back what it
measured: the GPU (or why there is none), the versions, one entry per step (limit, wall time, exit status, why it
skipped), the fast PPO train records, the device rollout's sync check and pytest's outcome per test.
The record commands use the standard library alone (they must work when the install failed); `versions` and `rollout`
import torch. Usage: python tools/gpu_quick.py COMMAND QUICK_JSON ... (see `--help` of each command)."""
import argparse, json, os, subprocess, sys, time
import xml.etree.ElementTree as ET
from pathlib import Path

SCHEMA_VERSION = 1
FILE_LIMIT = 8  # files the device tool brings back from $OUT
CARRY_LIMIT = 64 << 20  # what the device tool carries: the working tree and the carried paths together


def load(path):
    "The record at `path` (a new one when the file does not exist yet)."
    p = Path(path)
    return json.loads(p.read_text()) if p.exists() else dict(schema_version=SCHEMA_VERSION, steps=[])


def save(path, rec):
    "Write `rec` whole, then rename over `path`: a reader never sees half a record."
    p = Path(path)
    tmp = p.with_name(f'.{p.name}.tmp')
    tmp.write_text(json.dumps(rec, indent=1, default=str) + '\n')
    os.replace(tmp, p)


def update(path, **fields):
    "Merge `fields` into the record at `path`."
    rec = load(path)
    rec.update(fields)
    save(path, rec)
    return rec


def cmd_init(a):
    "A fresh record: when, where, the budget and the steps planned."
    rec = dict(schema_version=SCHEMA_VERSION, kit='tools/gpu_session.sh quick',
               started=time.strftime('%Y-%m-%dT%H:%M:%S%z'), commit=a.commit, budget_s=a.budget,
               planned=[s for s in a.planned.split(',') if s], steps=[], finished=False, host=os.uname().nodename)
    save(a.json, rec)


def cmd_step(a):
    "Append one step: its status (ok, failed, timeout, skipped, not run), limit, wall time and exit status."
    status = ('skipped' if a.skipped is not None else 'not run' if a.not_run else
              'ok' if a.rc == 0 else 'timeout' if a.rc in (124, 137) else 'failed')
    step = dict(name=a.name, status=status, limit_s=a.limit, wall_s=a.wall, rc=a.rc, file=a.file,
                reason=a.skipped or a.reason or '', stand_in=a.stand_in or '')
    rec = load(a.json)
    rec['steps'].append({k: v for k, v in step.items() if v not in (None, '')})
    save(a.json, rec)
    print(f"[kit] {a.name}: {status}" + (f" ({step['reason']})" if step['reason'] else '') +
          (f', {a.wall:.0f} s of {a.limit} s' if a.wall is not None and a.limit else ''), flush=True)


def cmd_set(a):
    "Set KEY (dotted: train.cudagraphs) to --json VALUE, --string VALUE or the JSON held in --file."
    if a.file:
        try: value = json.loads(Path(a.file).read_text())
        except (OSError, ValueError) as e: value = dict(error=f'{a.file}: {e}')
    else: value = a.string if a.string is not None else json.loads(a.json_value)
    rec = load(a.json)
    *parents, last = a.key.split('.')
    node = rec
    for k in parents: node = node.setdefault(k, {})
    node[last] = value
    save(a.json, rec)


def _version(dist):
    import importlib.metadata as md
    try: return md.version(dist)
    except md.PackageNotFoundError: return None


def cmd_versions(a):
    "Python, torch and CUDA, the GPU, and the packages the kit relies on (from metadata: JAX is never started)."
    out = dict(python=sys.version.split()[0], executable=sys.executable)
    for d in ('torch', 'triton', 'jax', 'onnxruntime', 'onnxruntime-gpu', 'onnx', 'numpy', 'cuda-bindings', 'tensorrt',
              'tensorrt-rtx', 'numba', 'gymnasium', 'mujoco', 'stable-baselines3', 'msgspec', 'ppo_trt'):
        out[d] = _version(d)
    try:
        import torch
        out['torch_cuda'] = torch.version.cuda
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            out['gpu'] = dict(name=p.name, capability=f'{p.major}.{p.minor}', sms=p.multi_processor_count,
                              memory_gib=round(p.total_memory / 2**30, 1), count=torch.cuda.device_count())
        else: out['gpu'] = None
    except Exception as e: out['torch_error'] = f'{type(e).__name__}: {e}'
    for k, v in out.items(): print(f'{k}: {v}')
    update(a.json, versions=out)


def _sync_check(env_id, num_envs, steps, dev):
    "One device rollout of `steps` under set_sync_debug_mode('error'): ok, or the first host synchronisation."
    import torch
    from ppo_trt.envs.batched.torch import make_batched, device_rollout
    env = make_batched(env_id, num_envs, dev)
    out = env.discrete_actions or env.act_dim
    mlp = torch.nn.Sequential(torch.nn.Linear(env.obs_dim, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64),
                              torch.nn.Tanh(), torch.nn.Linear(64, out)).to(dev)
    device_rollout(env, mlp, 5)  # lazy initialisation and allocations outside the checked region
    r = dict(env_id=env_id, num_envs=num_envs, steps=steps, device=str(dev))
    if dev.type == 'cuda':
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        torch.cuda.set_sync_debug_mode('error')
        try: total = device_rollout(env, mlp, steps)
        except RuntimeError as e: return {**r, 'ok': False, 'error': str(e).splitlines()[0][:300]}
        finally: torch.cuda.set_sync_debug_mode('default')
        torch.cuda.synchronize()
    else:
        t0 = time.perf_counter()
        total = device_rollout(env, mlp, steps)
    wall = time.perf_counter() - t0
    finite = bool(torch.isfinite(total).all())
    return {**r, 'ok': finite, 'wall_s': round(wall, 4), 'steps_per_s': steps * num_envs / wall,
            **({} if finite else {'error': 'non-finite returns'})}


def cmd_rollout(a):
    "The device rollout under torch.cuda.set_sync_debug_mode('error'); without a GPU the same rollout on the CPU."
    import torch
    cuda = torch.cuda.is_available()
    dev = torch.device('cuda' if cuda else 'cpu')
    why = '' if cuda else f'torch {torch.__version__} sees no CUDA GPU: the sync check needs one (CPU stand-in)'
    sizes = dict(zip(('CartPole-v1', 'Pendulum-v1'), (a.num_envs, a.num_envs) if cuda else (a.cpu_envs, a.cpu_envs)))
    checks = []
    for env_id, n in sizes.items():
        try: r = _sync_check(env_id, n, a.steps, dev)
        except Exception as e: r = dict(env_id=env_id, num_envs=n, ok=False, error=f'{type(e).__name__}: {e}'[:300])
        r['sync_checked'] = cuda
        print(f"rollout {env_id} x {n:,} on {dev}: {'ok' if r['ok'] else 'FAILED: ' + r.get('error', '')}"
              + (f", {r['steps_per_s']:.3g} steps/s" if 'steps_per_s' in r else '')
              + (' (no host synchronisation)' if cuda and r['ok'] else ''), flush=True)
        checks.append(r)
        update(a.json, rollout=dict(device=str(dev), sync_mode='error' if cuda else None, skipped_why=why,
                                    checks=checks))
    if why: print(f'sync check skipped: {why}')
    return 0 if all(c['ok'] for c in checks) else 1


def cmd_pytest(a):
    "pytest's junit XML as counts and one line per test (outcome, seconds, message)."
    try: root = ET.parse(a.junit).getroot()
    except (OSError, ET.ParseError) as e:
        update(a.json, pytest=dict(error=f'no junit report ({e}): pytest did not finish'))
        return
    tests, counts = [], dict(passed=0, failed=0, skipped=0, errors=0)
    for case in root.iter('testcase'):
        outcome, msg = 'passed', ''
        for tag, name in (('failure', 'failed'), ('error', 'errors'), ('skipped', 'skipped')):
            el = case.find(tag)
            if el is not None: outcome, msg = name, ((el.get('message') or '').splitlines() or [''])[0][:300]
        counts[outcome] += 1
        tests.append(dict(test=f"{case.get('classname', '')}::{case.get('name')}", outcome=outcome,
                          seconds=float(case.get('time') or 0), message=msg))
    update(a.json, pytest=dict(**counts, tests=tests))
    print('pytest -m gpu: ' + ', '.join(f'{v} {k}' for k, v in counts.items()))


def carried_bytes(root='.', gpu_dir='.gpu'):
    "(working tree, gpu_dir) sizes in bytes: what the device tool carries (tracked + untracked-not-ignored files)."
    root = Path(root)
    names = subprocess.run(['git', 'ls-files', '-co', '--exclude-standard', '-z'], cwd=root, capture_output=True,
                           check=True).stdout.split(b'\0')
    tree = sum((root/n.decode()).stat().st_size for n in names if n and (root/n.decode()).is_file())
    g = root/gpu_dir
    extra = sum(p.stat().st_size for p in g.rglob('*') if p.is_file()) if g.is_dir() else 0
    return tree, extra


def cmd_carried(a):
    "Print what travels; exit 1 when it is over --limit-mib."
    tree, extra = carried_bytes(a.root, a.gpu_dir)
    total = tree + extra
    mib = lambda n: f'{n / 2**20:.1f} MiB'
    print(f'carried: working tree {mib(tree)} + {a.gpu_dir} {mib(extra)} = {mib(total)} (limit {a.limit_mib} MiB)')
    return 0 if total < a.limit_mib << 20 else 1


def carried_names(path):
    "The distributions of a list file (one a line, # comments)."
    return [ln.strip() for ln in Path(path).read_text().splitlines() if ln.strip() and not ln.startswith('#')]


def cmd_pins(a):
    "NAME==VERSION for each distribution of the list, at this Python's installed version unless pinned there."
    import importlib.metadata as md
    pins, missing = [], []
    for n in carried_names(a.list):
        if '==' in n: pins.append(n); continue  # pinned in the list: not one of the project's own dependencies
        try: pins.append(f'{n}=={md.version(n)}')
        except md.PackageNotFoundError: missing.append(n)
    if missing:
        print(f"{a.list} names {', '.join(missing)}, not installed in {sys.executable}: pip install -e '.[dev]' there",
              file=sys.stderr)
        return 2
    print(' '.join(pins))


def cmd_summary(a):
    "The steps as a table, then the files under $OUT (the device tool brings back at most 8)."
    rec = load(a.json)
    rec['finished'], rec['wall_s'] = True, a.wall
    save(a.json, rec)
    gpu = rec.get('gpu') or ((rec.get('versions') or {}).get('gpu') or {}).get('name')  # set by gpu_check, always run
    where = gpu if gpu else 'no GPU: ' + rec.get('gpu_why', '?')
    print(f"quick: {where}; {a.wall} s of {rec.get('budget_s')} s")
    for s in rec['steps']:
        wall = f"{s['wall_s']:6.1f}" if s.get('wall_s') is not None else '     -'
        print(f"  {s['name']:<16} {s['status']:<8} {wall} s / {s.get('limit_s', '-'):>4} s  "
              f"{s.get('reason') or s.get('stand_in') or ''}"[:150])
    files = sorted(p.name for p in Path(a.json).parent.iterdir() if p.is_file())
    print(f"files under $OUT ({len(files)} of {FILE_LIMIT}): {' '.join(files)}")
    return 0 if len(files) <= FILE_LIMIT else 1


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest='cmd', required=True)
    c = sub.add_parser('init'); c.add_argument('json'); c.add_argument('--budget', type=int, required=True)
    c.add_argument('--planned', default=''); c.add_argument('--commit', default='')
    c = sub.add_parser('step'); c.add_argument('json'); c.add_argument('name')
    c.add_argument('--limit', type=int); c.add_argument('--wall', type=float); c.add_argument('--rc', type=int)
    c.add_argument('--file', default=''); c.add_argument('--skipped'); c.add_argument('--reason', default='')
    c.add_argument('--not-run', action='store_true'); c.add_argument('--stand-in', default='')
    c = sub.add_parser('set'); c.add_argument('json'); c.add_argument('key')
    v = c.add_mutually_exclusive_group(required=True)
    v.add_argument('--json', dest='json_value'); v.add_argument('--string'); v.add_argument('--file')
    c = sub.add_parser('versions'); c.add_argument('json')
    c = sub.add_parser('rollout'); c.add_argument('json'); c.add_argument('--num-envs', type=int, default=1 << 20)
    c.add_argument('--cpu-envs', type=int, default=4096); c.add_argument('--steps', type=int, default=100)
    c = sub.add_parser('pytest'); c.add_argument('json'); c.add_argument('junit')
    c = sub.add_parser('carried'); c.add_argument('--root', default='.'); c.add_argument('--gpu-dir', default='.gpu')
    c.add_argument('--limit-mib', type=int, default=62)
    c = sub.add_parser('pins'); c.add_argument('list')
    c = sub.add_parser('summary'); c.add_argument('json'); c.add_argument('--wall', type=int, default=0)
    a = p.parse_args(argv)
    return globals()[f'cmd_{a.cmd}'](a) or 0


if __name__ == '__main__': sys.exit(main())
