"""README.md's result figures cannot go stale: each is printed by a hidden code cell of nbs/index.ipynb from the
committed records (nbs/_reference/hopper). These tests re-run those cells on the records and check that the notebook
kept exactly what they print and that README.md holds it, and that the cells' code stays out of README.md."""
import json, os, shutil
from pathlib import Path
import pytest
from execnb.nbio import read_nb
from execnb.shell import CaptureShell

ROOT = Path(__file__).resolve().parents[1]
INDEX, README = ROOT/'nbs'/'index.ipynb', ROOT/'README.md'

def _text(x): return ''.join(x) if isinstance(x, list) else x

def markdown_outputs(nb):
    "Per code cell of `nb` (by id), the Markdown it printed ('' for a cell that prints nothing)."
    return {c.id: ''.join(_text(o.get('data', {}).get('text/markdown', '')) for o in c.get('outputs', []))
            for c in nb.cells if c.cell_type == 'code'}

def fresh_outputs(index=INDEX):
    "Run `index`'s code cells again, in its folder as nbdev_test does, and return what each printed."
    nb = read_nb(index)
    for c in nb.cells:
        if c.cell_type == 'code': c.outputs = []
    cwd = Path.cwd()
    try:
        os.chdir(Path(index).parent)
        CaptureShell().run_all(nb, exc_stop=True)
    finally: os.chdir(cwd)
    return markdown_outputs(nb)

def missing_from(readme_text, outputs):
    "The printed figures (a cell's Markdown, line by line) that `readme_text` does not hold verbatim."
    return [line for md in outputs.values() for line in md.splitlines() if line.strip() and line not in readme_text]

@pytest.fixture(scope='module')
def fresh(): return fresh_outputs()

def test_every_code_cell_is_hidden_and_every_figure_cell_prints_markdown(fresh):
    cells = [c for c in read_nb(INDEX).cells if c.cell_type == 'code']
    assert cells and all(c.metadata.get('transient', {}).get('remove_source') for c in cells), \
        'a code cell of index.ipynb would show its source in README.md: give it metadata transient.remove_source'
    assert sum(bool(md) for md in fresh.values()) >= 5, fresh

def test_the_notebook_kept_what_the_records_give(fresh):
    saved = markdown_outputs(read_nb(INDEX))
    stale = [i for i in fresh if fresh[i] != saved.get(i)]
    assert not stale, f'cells {stale} of nbs/index.ipynb print something else now: python tools/refresh_notebooks.py ' \
                      'nbs/index.ipynb, then regenerate README.md'

def test_the_readme_holds_every_figure(fresh):
    missing = missing_from(README.read_text(encoding='utf-8'), fresh)
    assert not missing, f'README.md lacks {missing[:3]}: regenerate it with jupyter nbconvert --log-level=ERROR ' \
                        '--to markdown --stdout nbs/index.ipynb > README.md'

def test_the_cells_code_stays_out_of_the_readme():
    readme = README.read_text(encoding='utf-8')
    code = [l for c in read_nb(INDEX).cells if c.cell_type == 'code' for l in c.source.splitlines()
            if len(l.strip()) > 30]
    assert code and not [l for l in code if l in readme]
    assert 'load_records(' not in readme and '#| echo: false' not in readme

SWEEP = ROOT/'nbs'/'_reference'/'hopper'/'sweep'/'sweep.json'
NOMINAL = json.loads(SWEEP.read_text())['aggregates']['iqm']['nominal']['nominal']  # one cell of the training table

def iqm_cell(est, digits=1):
    "A sweep-table cell as the README prints it: IQM [CI low, CI high]."
    return f"{est['iqm']:.{digits}f} [{est['ci'][0]:.{digits}f}, {est['ci'][1]:.{digits}f}]"

@pytest.mark.parametrize('right, typed', [('ONNX Runtime 1.32.0', 'ONNX Runtime 1.31'),  # what a user found typed
                                          (iqm_cell(NOMINAL, 0), iqm_cell(NOMINAL, 1))])
def test_a_figure_typed_into_the_readme_is_caught(fresh, right, typed):
    readme = README.read_text(encoding='utf-8')
    assert readme.count(right) == 1
    missing = missing_from(readme.replace(right, typed), fresh)
    assert len(missing) == 1 and right in missing[0], missing

def test_a_changed_record_is_caught(tmp_path):
    shutil.copytree(ROOT/'nbs'/'_reference', tmp_path/'nbs'/'_reference')
    shutil.copytree(ROOT/'benchmarks', tmp_path/'benchmarks')  # the GPU kit's records, beside nbs/ as in the repo
    shutil.copy(INDEX, tmp_path/'nbs'/'index.ipynb')
    sweep = tmp_path/'nbs'/'_reference'/'hopper'/'sweep'/'sweep.json'
    rec = json.loads(sweep.read_text())
    changed = rec['aggregates']['iqm']['nominal']['nominal']
    changed['iqm'] += 1
    sweep.write_text(json.dumps(rec))
    missing = missing_from(README.read_text(encoding='utf-8'), fresh_outputs(tmp_path/'nbs'/'index.ipynb'))
    assert len(missing) == 1 and missing[0].startswith('| nominal |') and iqm_cell(changed, 0) in missing[0], missing
