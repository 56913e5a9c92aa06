"""Fuzz every CPU backend in its own process (see fuzz_runners.py): never a crash signal; the checked call matches ONNX
Runtime within 1e-5 or raises BadInputError; the hot path may refuse but never reads past its input."""
import json, subprocess, sys
from pathlib import Path
import pytest
from ppo_trt.backends import registry as B

CPU = [n for n, (ok, _) in B.available().items() if ok and not B.backends()[n].gpu]
N_INPUTS = 3000


@pytest.mark.parametrize('name', [pytest.param(n, marks=pytest.mark.slow) if n == 'torch-compile' else n
                                  for n in CPU])  # compiling takes a while: `pytest -m slow`
@pytest.mark.slow  # over 9 s on a slow 2-core box: with the long checks (pytest -m slow tests)
def test_fuzz_checked_call_and_hot_path(run_dir, name):
    r = subprocess.run([sys.executable, str(Path(__file__).with_name('fuzz_runners.py')), str(run_dir), name,
                        str(N_INPUTS), '0'], capture_output=True, text=True)
    assert r.returncode == 0, f'{name}: return code {r.returncode} (negative = killed by a signal)\n{r.stderr[-3000:]}'
    res = json.loads(r.stdout.splitlines()[-1])
    print(name, {k: v for k, v in res.items() if k != 'kinds'})
    assert res['n_problems'] == 0, res['problems']
    assert (res['inputs'] == N_INPUTS == res['checked_matched'] + res['checked_refused']
            == res['run_returned'] + res['run_raised'])
    assert res['checked_matched'] > 500 and res['checked_refused'] > 1000  # both sides of the contract were exercised
    assert set(res['kinds']) >= {'plain', 'dtype', 'swapped', 'fortran', 'strided', 'readonly', 'unaligned', 'ndim',
                                 'list', 'empty'}
