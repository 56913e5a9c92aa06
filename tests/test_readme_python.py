"""The README's Python blocks run as written: a quick check that each block defines every name it uses (a README once
used `obs` without making one), and a slow one that executes each ```python block of README.md in order, in a folder
holding the run folder command 1 makes (`runs/Hopper-v4-ppo`, here the session's quick `ppo-trt run`)."""
import ast, builtins, os, shutil, subprocess, sys
from pathlib import Path
import pytest
from test_readme_commands import README, fenced

BLOCKS = [body for lang, body in fenced(README)[0] if lang == 'python']

def undefined_names(code):
    "Names `code` reads that it never binds (import, assignment, def, for, with, comprehension) and Python lacks."
    tree, bound, read = ast.parse(code), set(dir(builtins)), []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split('.')[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)): bound.add(node.name)
        elif isinstance(node, ast.arg): bound.add(node.arg)
        elif isinstance(node, ast.Name):
            (bound.add if isinstance(node.ctx, ast.Store) else read.append)(node.id)
    return sorted(set(read) - bound)

def test_the_readme_has_python_blocks():
    assert len(BLOCKS) >= 2 and any('ppo_trt.load(' in b for b in BLOCKS) and any('ControlLoop' in b for b in BLOCKS)

@pytest.mark.parametrize('i', range(len(BLOCKS)))
def test_each_python_block_defines_what_it_uses(i):
    assert undefined_names(BLOCKS[i]) == [], f'README python block {i + 1} uses names it never defines'

def test_the_check_sees_an_undefined_name():  # the README's block as a newcomer met it
    assert undefined_names('import numpy as np\nrunner = 1\naction = runner(obs[None].astype(np.float32))') == ['obs']
    assert undefined_names('for k, v in {}.items(): print(k, v)\nf = lambda x: x') == []

@pytest.mark.slow
def test_every_python_block_runs_as_written(run_dir, tmp_path):
    shutil.copytree(run_dir, tmp_path/'runs'/'Hopper-v4-ppo')  # where command 1 writes it
    env = {**os.environ, 'PYTHONWARNINGS': 'ignore', 'MPLBACKEND': 'Agg'}
    for i, code in enumerate(BLOCKS):
        r = subprocess.run([sys.executable, '-c', code], cwd=tmp_path, capture_output=True, text=True, env=env,
                           timeout=900)
        assert r.returncode == 0, f'README python block {i + 1}:\n{code}\n{r.stdout[-1500:]}\n{r.stderr[-3000:]}'
    made = tmp_path/'runs'/'hopper'
    assert {'policy.zip', 'policy.onnx', 'bench.json', 'evaluate.json'} <= {p.name for p in made.iterdir()}
    assert (made/'c_policy'/'ppo_policy.h').is_file()
