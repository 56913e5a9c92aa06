"""The README and the pages the site is built from speak to a reader, not to the people who built them: no issue
numbers, internal time limits, exceptions in place of a result, tool or loan talk, no visible `RUN_DIR = ...` cell;
and README.md reads as text: at most 250 lines, no HTML entities, no runs of blank lines."""
import html, json, re
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT/'README.md').read_text(encoding='utf-8')
INSIDER = {'an issue number': r'\b[Ii]ssue #?\d+', 'an exception for a result': r'\bTimeoutError\b',
           'an internal time limit': r'\b\d+ s (?:limit|left)\b|\bits \d+ s limit\b',
           'tool talk': r'search tools|device tool|\bbudget_left', 'loan talk': r'\blent\b|\bloans?\b'}
_DATA = re.compile(r'data:image/[\w+.-]+;base64,[^"\'\s)]+')
CODE_MAY = {'an exception for a result', 'an internal time limit'}
HIDDEN = re.compile(r'^\s*#\|\s*(?:echo:\s*false|hide|include:\s*false)\s*$', re.M)

def _text(x): return ''.join(x) if isinstance(x, list) else str(x)

def page_texts(nb_path):
    "(where, text) of what a notebook shows on the site: Markdown, the code of shown cells, and every output."
    for i, c in enumerate(json.loads(Path(nb_path).read_text(encoding='utf-8'))['cells']):
        src, where = _text(c['source']), f'{Path(nb_path).name} cell {i}'
        if c['cell_type'] == 'markdown': yield where, src
        elif not HIDDEN.search(src): yield f'{where} code', src  # code may name an exception it handles
        for o in c.get('outputs', []):
            for v in [v for k, v in o.get('data', {}).items() if k.startswith('text/')] + [o.get('text', '')]:
                if isinstance(v, (str, list)):  # an inline figure's data is no text
                    yield f'{where} output', html.unescape(_DATA.sub('', _text(v)))

def insider(texts):
    "Each (where, what, the words) an insider pattern finds in `texts`."
    return [(where, what, m.group(0)) for where, t in texts for what, pat in INSIDER.items()
            if not (where.endswith(' code') and what in CODE_MAY) for m in re.finditer(pat, t)]

def shown_parameter_cells(nb_path):
    "Code cells whose `RUN_DIR = ...` line a reader would see on the page."
    return [i for i, c in enumerate(json.loads(Path(nb_path).read_text(encoding='utf-8'))['cells'])
            if c['cell_type'] == 'code' and re.search(r'^RUN_DIR = ', _text(c['source']), re.M)
            and not HIDDEN.search(_text(c['source']))]

NOTEBOOKS = sorted((ROOT/'nbs').glob('*.ipynb'))

def test_no_insider_text_in_the_readme():
    assert insider([('README.md', README)]) == []

@pytest.mark.parametrize('nb', NOTEBOOKS, ids=lambda p: p.name)
def test_no_insider_text_on_the_site(nb):
    assert insider(page_texts(nb)) == [] and shown_parameter_cells(nb) == []

def test_the_readme_reads_as_text():
    assert len(README.splitlines()) <= 250, len(README.splitlines())
    assert not re.search(r'&#?\w+;', README), re.search(r'.{40}&#?\w+;.{40}', README).group(0)
    assert '\n\n\n\n' not in README  # at most two blank lines in a row (nbconvert's between a cell and its output)

def test_the_checks_see_what_a_reader_met(tmp_path):
    met = ("Issue 35's targets for an H100", 'MJX at 8192 envs: TimeoutError: not run: -21 s of the 150 s left',
           'stopped at its 157 s limit while the size after these ran', "within reach of this project's search tools")
    assert [w for w, *_ in insider([(m, m) for m in met])] == [met[0], met[1], met[1], met[2], met[3]]
    assert insider([('ok', 'a 2-step delay, 150 N push; 10 s of training, a lentil')]) == []
    nb = tmp_path/'x.ipynb'
    nb.write_text(json.dumps(dict(cells=[dict(cell_type='code', source=["RUN_DIR = '_reference/hopper'"], outputs=[]),
                                         dict(cell_type='code', source=['#| echo: false\n', "RUN_DIR = 'x'"],
                                              outputs=[dict(output_type='stream', text='Issue 3 &#58; done')])])))
    assert shown_parameter_cells(nb) == [0]
    assert insider(page_texts(nb)) == [('x.ipynb cell 1 output', 'an issue number', 'Issue 3')]
