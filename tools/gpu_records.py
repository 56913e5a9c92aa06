"""What `tools/gpu_session.sh quick` brought back ($OUT: quick.json and the files beside it) as a folder of records,
benchmarks/<gpu>-<yyyy-mm-dd>/, each in the project's schema and read back through it before anything is written:
bench.json (BenchFile), env_bench_CartPole-v1.json (EnvBenchRecord), fast-<variant>/train.json (TrainRecord),
gpu_session.json (the session: device, versions, each step's limit, wall time and status, the skips and their reasons,
the persistent kernel's batch-1 figures, the device rollout's sync check, pytest per test), mjx_Hopper-v4.json (the
mjx step, when it ran), logs/*.txt, and README.md (the figures and the targets, met or not).
Without a GPU (the CPU box's rehearsal) the folder is named cpu-rehearsal-<date>. Nothing is half-written: the folder
is built beside its place and renamed into it; an existing one is kept unless --replace.
Usage: python tools/gpu_records.py OUT_DIR [--dest benchmarks] [--name NAME] [--replace]"""
import argparse, html, json, os, re, shutil, sys
from pathlib import Path

SESSION_SCHEMA = 1


class RecordsError(Exception):
    "A returned folder that cannot become records: one line, what is wrong and the fix."


def cell(x):
    "Text for one markdown table cell: no HTML, no column break, one line."
    return html.escape(str(x), quote=False).replace('|', '\\|').replace('\n', ' ').replace('`', "'")


def fmt(x):
    "A figure to 3 significant digits, or a dash."
    return '-' if x is None else f'{x:.3g}'


def slug(gpu_name):
    "The GPU's model for a folder name: 'NVIDIA H100 80GB HBM3' -> 'h100'."
    m = re.search(r'\b([A-Z]{1,2}\d{2,4}[A-Z]?)\b', gpu_name.replace('NVIDIA', ''))
    s = m.group(1) if m else gpu_name.replace('NVIDIA', '')
    return re.sub(r'[^a-z0-9]+', '-', s.lower()).strip('-') or 'gpu'


def read_session(out):
    "quick.json, checked: the session record every other file is read against."
    p = out/'quick.json'
    if not p.is_file():
        raise RecordsError(f'{out} has no quick.json: give the folder where `tools/gpu_session.sh quick` wrote its '
                           "files (the device call's files_at)")
    try: rec = json.loads(p.read_text())
    except (ValueError, RecursionError) as e:
        raise RecordsError(f'{p} is not valid JSON ({str(e)[:80]}): the session was cut off while writing it; '
                           'the other files may still be read, but there is no session record to name them') from None
    if not isinstance(rec, dict) or not isinstance(rec.get('steps'), list) or rec.get('schema_version') != 1:
        raise RecordsError(f'{p} is not a gpu_session.sh quick record (schema 1 with a list of steps)')
    return rec


def load(path):
    "The JSON at `path`, or RecordsError."
    try: return json.loads(Path(path).read_text())
    except (OSError, ValueError, RecursionError) as e: raise RecordsError(f'{path}: {str(e)[:120]}') from None


def check_record(path, source):
    "Read the record at `path` through the project's schema for its file name; RecordsError naming `source` if not."
    from ppo_trt.core.records import read_record
    from ppo_trt.core.files import PpoTrtError
    try: r = read_record(path)
    except PpoTrtError as e:
        why = str(e).split('; ')[0].replace(str(path), str(source))  # read_record's fix (rerun a stage) is not ours
        raise RecordsError(f'{why}; the returned file is damaged, or another ppo_trt wrote it: convert with that '
                           'checkout') from None
    if isinstance(r, dict): raise RecordsError(f'{path.name} has no schema in ppo_trt.core.records')


def gpu_of(session):
    "(the GPU's name or None, the versions' description of it)."
    v = session.get('versions') or {}
    return session.get('gpu') or (v.get('gpu') or {}).get('name'), v.get('gpu') or {}


def check_mjx(mjx, source):
    "mjx.json (tools/gpu_mjx.py) as it must be to be kept: rows of numbers, or RecordsError."
    rows = mjx.get('rows') if isinstance(mjx, dict) else None
    ok = isinstance(rows, list) and isinstance(mjx.get('errors', []), list) and all(
        isinstance(r, dict) and isinstance(r.get('impl'), str) and isinstance(r.get('num_envs'), int)
        and all(isinstance(r.get(k), (int, float)) and r[k] > 0 for k in ('env_steps_per_s', 'physics_steps_per_s'))
        for r in rows)
    if not ok: raise RecordsError(f'{source} is not a tools/gpu_mjx.py record (rows of impl, num_envs, steps/s)')
    return mjx


def check_persistent(rec, source):
    "quick.json's `persistent` (tools/gpu_persistent.py) as it must be to be shown: figures, or the error it met."
    figures = lambda d: isinstance(d, dict) and all(isinstance(d.get(k), (int, float)) for k in ('p50_us', 'p99_us',
                                                                                                   'p999_us'))
    ok = isinstance(rec, dict) and (isinstance(rec.get('error'), str) or (
        figures(rec.get('checked_call')) and figures(rec.get('hot_path')) and isinstance(rec.get('parity_ok'), bool)
        and isinstance((rec.get('parity_vs_ort_fp32') or {}).get('max_abs_err'), (int, float))))
    if not ok: raise RecordsError(f'{source} is not a tools/gpu_persistent.py record (latency figures and parity)')
    return rec


def persistent_section(rec):
    "README lines of the persistent kernel's batch-1 figures (or why there are none)."
    L = ['', '## Batch 1 on the persistent kernel (cuda-persistent)', '']
    if 'error' in rec: return L + [f"Failed: {cell(rec['error'])}"]
    c, h, p = rec['checked_call'], rec['hot_path'], rec['parity_vs_ort_fp32']
    where = ('Simulated: a Python thread stands in for the kernel (the host protocol tested, no GPU timed).'
             if rec.get('simulated') else f"On {cell((rec.get('info') or {}).get('gpu', '?'))}.")
    return L + [where + ' Latency in µs; parity: max abs action error vs ONNX Runtime FP32, one row at a time.', '',
                '| call | calls | p50 | p99 | p99.9 | max |', '| --- | --- | --- | --- | --- | --- |',
                *(f"| {cell(k)} | {d.get('n', '-')} | {fmt(d['p50_us'])} | {fmt(d['p99_us'])} | {fmt(d['p999_us'])} | "
                  f"{fmt(d.get('max_us'))} |" for k, d in (('runner(obs)', c), ('runner.run(obs)', h))), '',
                f"Parity: {fmt(p['max_abs_err'])} (bound {fmt(p.get('bound'))}): "
                f"{'ok' if rec['parity_ok'] else 'FAILED'}. Close: {fmt(rec.get('close_s'))} s "
                f"({cell(rec.get('stopped', '?'))})."]


def readme(session, bench, env, trains, name, mjx=None):
    "README.md of the folder: the device, each step, the figures, the targets; every string escaped for markdown."
    from ppo_trt.results.report import gpu_backend_table, gpu_targets_table, gpu_mjx_section
    gpu, props = gpu_of(session)
    v = session.get('versions') or {}
    L = [f'# GPU session {cell(name)}', '',
         (f"Device: **{cell(gpu)}**" + (f" (compute capability {cell(props.get('capability', '?'))}, "
          f"{cell(props.get('sms', '?'))} SMs, {cell(props.get('memory_gib', '?'))} GiB)" if props else '') if gpu else
          f"No GPU: {cell(session.get('gpu_why', 'unknown'))}. These are the CPU box's rehearsal records, not GPU "
          'figures.'), '',
         ('Versions: ' + ', '.join(f'{cell(k)} {cell(v[k])}' for k in ('python', 'torch', 'torch_cuda', 'triton', 'jax',
                                                                      'onnxruntime', 'onnx', 'numpy', 'ppo_trt')
                                   if v.get(k)) + '.' if v
          else 'Versions: not recorded (the versions step did not run).'),
         f"Session: {cell(session.get('started', '?'))}, commit {cell(session.get('commit', '?'))}, "
         f"{cell(session.get('wall_s', '?'))} s of a {cell(session.get('budget_s', '?'))} s budget"
         + ('' if session.get('finished') else ' (cut off: it did not reach its summary)') + '.', '',
         '| step | status | wall / limit (s) | why, or what ran instead |', '| --- | --- | --- | --- |']
    for s in session['steps']:
        L.append(f"| {cell(s['name'])} | {cell(s['status'])} | {cell(s.get('wall_s', '-'))} / "
                 f"{cell(s.get('limit_s', '-'))} | {cell(s.get('reason') or s.get('stand_in') or '')} |")
    if session.get('persistent'): L += persistent_section(session['persistent'])
    if bench:
        L += ['', '## Policy latency and throughput (bench.json)', '',
              'Batch 1: the checked call `runner(obs)` and the kernel alone (CUDA events), p50 / p99 / p99.9 in µs; '
              'parity: max abs action error vs ONNX Runtime FP32 on export_obs.npy; best actions/s over the sweep.', '',
              str(gpu_backend_table(bench))]  # the Results page's table (ppo_trt.results.report)
    if env:
        L += ['', '## Batched CartPole (env_bench_CartPole-v1.json)', '', '| level | implementation | envs | steps/s |',
              '| --- | --- | --- | --- |']
        L += [f"| {cell(r['level'])} | {cell(r['impl'])} | {r['num_envs']:,} | {fmt(r['steps_per_s'])} |"
              for r in env['rows']]
        L += [f"| {cell(e['level'])} | failed: {cell(e['error'])} | {e['num_envs']:,} | - |"
              for e in env.get('errors', [])]
    if trains:
        L += ['', '## Fast PPO on CartPole-v1 (fast-*/train.json)', '',
              '| variant | device | solved | return | solved at step | solved at (s) | wall (s) | steps/s |',
              '| --- | --- | --- | --- | --- | --- | --- | --- |']
        L += [f"| {cell(k)} | {cell(t.get('device'))} | {cell(t.get('solved'))} | {fmt(t.get('final_eval_mean'))} | "
              f"{cell(t.get('solved_at_timesteps'))} | {cell(t.get('solved_at_wall_s'))} | {cell(t.get('wall_s'))} | "
              f"{fmt(t.get('steps_per_s'))} |" for k, t in trains.items()]
    if mjx: L += gpu_mjx_section([dict(name=name, session=session, mjx=mjx)]).split('\n')
    ro = session.get('rollout')
    if ro:
        L += ['', '## Device rollout', '', ("Under torch.cuda.set_sync_debug_mode('error')." if ro.get('sync_mode')
                                            else f"Sync check skipped: {cell(ro.get('skipped_why', ''))}"), '']
        L += [f"- {cell(c['env_id'])} x {c['num_envs']:,} on {cell(c['device'])}: "
              + ('ok' if c['ok'] else f"FAILED: {cell(c.get('error', ''))}") for c in ro.get('checks', [])]
    pt = session.get('pytest')
    if pt:
        counts = ', '.join(f'{pt[k]} {k}' for k in ('passed', 'failed', 'skipped', 'errors') if k in pt)
        L += ['', '## pytest -m gpu', '', cell(pt.get('error') or counts), '']
        L += [f"- {cell(t['test'])}: {cell(t['outcome'])}" + (f" ({cell(t['message'])})" if t['message'] else '')
              for t in pt.get('tests', []) if t['outcome'] != 'passed']
    if gpu and (bench or env or trains):
        L += ['', "## Targets (issue 35's, for an H100)", '', str(gpu_targets_table(bench, env, trains))]
    return '\n'.join(L) + '\n'


def convert(out, dest, name=None, replace=False):
    "Write the records of returned folder `out` into dest/<name>; the folder's path."
    out, dest = Path(out), Path(dest)
    session = read_session(out)
    gpu, _ = gpu_of(session)
    date = str(session.get('started', ''))[:10]
    if not re.fullmatch(r'\d{4}-\d{2}-\d{2}', date): raise RecordsError(f"quick.json's start {date!r} is not a date")
    name = name or (f'{slug(gpu)}-{date}' if gpu else f'cpu-rehearsal-{date}')
    if not re.fullmatch(r'[A-Za-z0-9][A-Za-z0-9._-]*', name): raise RecordsError(f'{name!r} is not a plain folder name')
    target = dest/name
    if target.exists() and not replace:
        raise RecordsError(f'{target} exists: give --replace to write over it, or --name for another folder')
    bench = load(out/'bench.json') if (out/'bench.json').exists() else None
    env = load(out/'env_bench.json') if (out/'env_bench.json').exists() else None
    mjx = check_mjx(load(out/'mjx.json'), out/'mjx.json') if (out/'mjx.json').exists() else None
    if 'persistent' in session: check_persistent(session['persistent'], out/'quick.json (persistent)')
    env_id = (env or {}).get('env_id') or 'CartPole-v1'
    if not re.fullmatch(r'[A-Za-z0-9_-]+-v\d+', env_id): raise RecordsError(f'env_bench.json: env id {env_id!r}')
    trains = {}
    for variant, t in (session.get('train') or {}).items():
        if not re.fullmatch(r'[a-z0-9_-]+', variant):
            raise RecordsError(f'train variant {variant!r} is not a plain name')
        if 'error' in t and len(t) == 1: continue  # the run wrote no train.json: the step's status says why
        trains[variant] = t
    dest.mkdir(parents=True, exist_ok=True)
    tmp = dest/f'.{name}.tmp-{os.getpid()}'
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        for variant, t in trains.items():
            (tmp/f'fast-{variant}').mkdir()
            (tmp/f'fast-{variant}'/'train.json').write_text(json.dumps(t, indent=1) + '\n')
            check_record(tmp/f'fast-{variant}'/'train.json', out/f'quick.json (train.{variant})')
        if bench:
            (tmp/'bench.json').write_text(json.dumps(bench, indent=1) + '\n')
            check_record(tmp/'bench.json', out/'bench.json')
        if env:
            (tmp/f'env_bench_{env_id}.json').write_text(json.dumps(env, indent=1) + '\n')
            check_record(tmp/f'env_bench_{env_id}.json', out/'env_bench.json')
        if mjx: (tmp/'mjx_Hopper-v4.json').write_text(json.dumps(mjx, indent=1) + '\n')
        kept = {k: v for k, v in session.items() if k != 'train'}
        kept.update(record='gpu_session', schema_version=SESSION_SCHEMA, source_files=sorted(
            p.name for p in out.iterdir() if p.is_file()), train_variants=sorted(trains))
        (tmp/'gpu_session.json').write_text(json.dumps(kept, indent=1) + '\n')
        logs = sorted(p for p in out.glob('*.txt') if p.is_file())
        if logs: (tmp/'logs').mkdir()
        for p in logs: shutil.copyfile(p, tmp/'logs'/p.name)
        (tmp/'README.md').write_text(readme(session, bench, env, trains, name, mjx))
        if target.exists():
            old = dest/f'.{name}.old-{os.getpid()}'
            os.rename(target, old)
            os.rename(tmp, target)
            shutil.rmtree(old)
        else: os.rename(tmp, target)
    finally: shutil.rmtree(tmp, ignore_errors=True)
    return target


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('out', help="the folder gpu_session.sh quick wrote ($OUT; the device call's files_at)")
    p.add_argument('--dest', default='benchmarks', help='where the records folder goes (default: %(default)s)')
    p.add_argument('--name', help='the folder name (default: <gpu>-<yyyy-mm-dd>, or cpu-rehearsal-<date>)')
    p.add_argument('--replace', action='store_true', help='write over an existing folder of that name')
    a = p.parse_args(argv)
    try: target = convert(a.out, a.dest, a.name, a.replace)
    except RecordsError as e:
        print(f'gpu_records: {e}', file=sys.stderr)
        return 2
    print(f'gpu_records: wrote {target}: ' + ' '.join(sorted(str(x.relative_to(target)) for x in target.rglob('*')
                                                             if x.is_file())))
    return 0


if __name__ == '__main__': sys.exit(main())
