"""The README's docs command, `pip install -e ".[docs]" && ppo-trt docs --out _docs`, builds the site: nbdev runs every
notebook's import cells, exported cells and `show_doc` cells while it renders the pages, so each module those cells
import at their top level comes from the standard library, ppo_trt, or a distribution `ppo_trt[docs]` brings
(settings.ini's `requirements` and `docs_requirements`, and what they require in turn). No fresh venv: the check reads
the notebooks and the installed distributions' metadata."""
import ast, configparser, functools, json, re, sys
from importlib.metadata import packages_distributions, requires
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT/'README.md').read_text(encoding='utf-8')
_DIRECTIVES = re.compile(r'^\s*#\|\s*(export|exports|exporti|exec_doc)\b', re.M)
_NAME = re.compile(r'^\s*([A-Za-z0-9_.-]+)\s*(?:\[([^\]]*)\])?')

def _norm(name): return name.lower().replace('_', '-').replace('.', '-')

def _spec(s):
    "(distribution, extras) of a requirement specifier such as `gymnasium[mujoco]>=1.1; python_version>'3'`."
    m = _NAME.match(s)
    return _norm(m.group(1)), {e.strip() for e in (m.group(2) or '').split(',') if e.strip()}

@functools.lru_cache
def extra_closure(keys=('requirements', 'docs_requirements')):
    "The distributions `pip install -e \".[docs]\"` brings: settings.ini's lists under `keys` and their requirements."
    cfg = configparser.ConfigParser(delimiters=['=']); cfg.read(ROOT/'settings.ini', encoding='utf-8')
    todo, seen = [_spec(s) for k in keys for s in cfg['DEFAULT'][k].split()], set()
    while todo:
        name, extras = todo.pop()
        if (name, frozenset(extras)) in seen: continue
        seen.add((name, frozenset(extras)))
        try: reqs = requires(name) or []
        except Exception: continue  # not installed here: its name still counts
        for r in reqs:
            body, _, marker = r.partition(';')
            wanted = re.findall(r'extra\s*==\s*["\']([^"\']+)["\']', marker)
            if wanted and not set(wanted) & extras: continue
            todo.append(_spec(body))
    return {n for n, _ in seen}

def executed_by_nbdev(src):
    "Whether nbdev's docs processor runs this code cell (nbdev.processors._do_eval): exported, importing, or show_doc."
    if not (_DIRECTIVES.search(src) or 'import' in src or 'show_doc' in src): return None
    try: tree = ast.parse('\n'.join(l for l in src.splitlines() if not l.lstrip().startswith(('%', '!'))))
    except SyntaxError: return None
    if _DIRECTIVES.search(src) or 'show_doc' in src or \
       any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in ast.walk(tree)): return tree

def docs_time_imports(nbs=ROOT/'nbs'):
    "{top-level package: notebooks} that the cells nbdev runs import at their top level (try/except excluded)."
    out = {}
    for nb in sorted(Path(nbs).glob('*.ipynb')):
        for c in json.loads(nb.read_text(encoding='utf-8'))['cells']:
            tree = c['cell_type'] == 'code' and executed_by_nbdev(''.join(c['source']))
            for node in (tree.body if tree else []):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                         [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else [])
                for n in names: out.setdefault(n.split('.')[0], set()).add(nb.name)
    return out

@functools.lru_cache
def _distributions(): return packages_distributions()

def not_installed_by(closure, imports):
    "(package, notebooks, distributions providing it) for each import no distribution of `closure` provides."
    dists = _distributions()
    return [(m, sorted(nbs)[:3], sorted(dists.get(m, []))) for m, nbs in sorted(imports.items())
            if m not in sys.stdlib_module_names and m not in ('ppo_trt', '__future__')
            and not {_norm(d) for d in dists.get(m, [m])} & closure]

def test_the_readme_quotes_the_docs_command():
    assert 'pip install -e ".[docs]" && ppo-trt docs --out _docs' in README

def test_the_docs_extra_installs_what_the_notebooks_import():
    imports = docs_time_imports()
    assert {'pandas', 'numpy', 'fastcore'} <= set(imports) and 'ray' in imports, sorted(imports)
    assert not_installed_by(extra_closure(), imports) == [], \
        'add these to settings.ini docs_requirements (or import them inside the function that needs them)'

def test_the_check_sees_an_import_the_extra_lacks(tmp_path):
    cells = [dict(cell_type='code', source=['#| export\n', 'import pandas as pd\n', 'def f(): import ray\n']),
             dict(cell_type='code', source=['try: import triton\n', 'except ImportError: pass\n']),
             dict(cell_type='code', source=['x = 1\n']), dict(cell_type='markdown', source=['import scipy'])]
    (tmp_path/'01_x.ipynb').write_text(json.dumps(dict(cells=cells)))
    imports = docs_time_imports(tmp_path)
    assert imports == {'pandas': {'01_x.ipynb'}}  # in a function, guarded, or in prose: not run at docs time
    assert [m for m, *_ in not_installed_by(extra_closure(('requirements',)), imports)] == ['pandas']
    assert not_installed_by(extra_closure(), imports) == []
