"""Re-execute notebooks in place, keeping their outputs: what `nbdev_test --flags slow` runs (smoke-sized work and the
long checks; `gpu` and `full` cells skipped and their outputs cleared), one notebook per process, then `nbdev_clean`.

    python tools/refresh_notebooks.py            # every notebook in nbs/
    python tools/refresh_notebooks.py nbs/50_bench.ipynb ...
"""
import os, re, subprocess, sys, time
from pathlib import Path

KERNELSPEC = dict(name='python3', display_name='Python 3', language='python')

def skip_flags():
    "The `tst_flags` of settings.ini: cells carrying one are not run (nor by nbdev_test)."
    m = re.search(r'^tst_flags\s*=\s*(.*)$', Path('settings.ini').read_text(), re.M)
    return set(m.group(1).split()) if m else set()

def _flags(source):
    "The words of a cell's `#|` lines; `eval: false` (exported, never run here) counts as a skip flag."
    words = {w for line in source.splitlines() if line.startswith('#|') for w in line[2:].split()}
    return words | ({'eval:false'} if re.search(r'^#\|\s*eval:\s*false', source, re.M) else set())

def refresh_one(path):
    "Execute one notebook in this process and write it back with outputs."
    from execnb.nbio import read_nb, write_nb
    from execnb.shell import CaptureShell
    os.environ['IN_TEST'] = '1'  # as nbdev_test runs it
    nb, skip = read_nb(path), (skip_flags() - {'slow'}) | {'eval:false'}  # slow cells run: their outputs are docs
    for c in nb.cells:
        if c.cell_type == 'code' and _flags(c.source) & skip: c.outputs, c.execution_count = [], None
    shell = CaptureShell(path)
    os.chdir(Path(path).parent)
    shell.run_all(nb, exc_stop=True, preproc=lambda c: c.cell_type != 'code' or bool(_flags(c.source) & skip))
    nb.metadata['kernelspec'] = KERNELSPEC
    write_nb(nb, Path(path).name)

def main(paths):
    paths = paths or sorted(str(p) for p in Path('nbs').glob('*.ipynb'))
    env = {**os.environ, 'MPLBACKEND': 'Agg', 'PYTHONWARNINGS': 'ignore'}
    for p in paths:
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, __file__, '--one', p], env=env, capture_output=True, text=True)
        print(f'{p}: {"ok" if r.returncode == 0 else "FAILED"} in {time.perf_counter() - t0:.0f} s', flush=True)
        if r.returncode: print(r.stderr[-3000:]); return 1
    return subprocess.run(['nbdev_clean']).returncode

if __name__ == '__main__':
    if sys.argv[1:2] == ['--one']: refresh_one(sys.argv[2])
    else: sys.exit(main(sys.argv[1:]))
