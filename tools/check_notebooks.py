"""CI checks on the notebooks: the layout rule (a notebook imports only modules of earlier notebooks), the python3
kernelspec, saved outputs from a real execution (refresh them with `python tools/refresh_notebooks.py`), and no cell
that the docs build would execute out of context."""
import ast, json, re, sys
from pathlib import Path

def module_of(nb):
    "The module a notebook exports to (its `#| default_exp`), or None."
    for c in nb['cells']:
        m = re.search(r'^#\|\s*default_exp\s+(\S+)', ''.join(c['source']), re.M)
        if m: return m.group(1)

def imports(nb):
    "Every ppo_trt module the notebook's cells import (at any depth)."
    text = '\n'.join(''.join(c['source']) for c in nb['cells'] if c['cell_type'] == 'code')
    direct = set(re.findall(r'(?:from|import)\s+ppo_trt\.([a-z_.]+)', text))
    named = {f'{pkg}.{part.split()[0]}'.lstrip('.')
             for pkg, names in re.findall(r'from\s+ppo_trt((?:\.[a-z_]+)*)\s+import\s+([a-z_, ]+(?: as \w+)?)', text)
             for part in names.split(',') if part.strip()}
    return direct | named

def layout_problems(paths):
    "Imports of a later (or the same-numbered other) notebook's module."
    order = {m: (i, p.name) for i, p in enumerate(paths) if (m := module_of(json.loads(p.read_text())))}
    return [f'{p.name} imports ppo_trt.{m}, which {order[m][1]} defines later' for i, p in enumerate(paths)
            for m in sorted(imports(json.loads(p.read_text()))) if m in order and order[m][0] > i]

def _runnable(c):
    src = ''.join(c['source'])
    return c['cell_type'] == 'code' and src.strip() and not re.match(r'#\|\s*(export|default_exp|gpu|full|hide)\b', src)

def output_problems(paths):
    "Notebooks without a kernelspec, or whose runnable cells kept no output at all."
    out = []
    for p in paths:
        nb = json.loads(p.read_text())
        if nb.get('metadata', {}).get('kernelspec', {}).get('name') != 'python3':
            out.append(f'{p.name} has no python3 kernelspec')
        cells = [c for c in nb['cells'] if _runnable(c)]
        if cells and not any(c.get('outputs') for c in cells): out.append(f'{p.name} has no saved outputs')
    return out

_DOC_RUN = {'export', 'exports', 'exporti', 'exec_doc'}

def _docs_run_it(src):
    "Whether nbdev's docs processors execute this cell although it is no export: it imports, and does more."
    body = '\n'.join(l for l in src.splitlines() if not l.lstrip().startswith(('%', '!', '#|')))
    try: nodes = list(ast.walk(ast.parse(body)))
    except SyntaxError: return False
    return (any(isinstance(n, (ast.Import, ast.ImportFrom)) for n in nodes)
            and any(isinstance(n, (ast.Expr, ast.Assign)) for n in nodes))

def doc_run_problems(paths):
    "Demo or test cells that mix imports with other code: the docs build runs them where the cells before did not run."
    out = []
    for p in paths:
        for i, c in enumerate(json.loads(p.read_text())['cells']):
            src = ''.join(c['source'])
            marks = set(re.findall(r'^#\|\s*([\w-]+)', src, re.M))
            if c['cell_type'] == 'code' and not marks & (_DOC_RUN | {'echo', 'eval'}) and _docs_run_it(src):
                out.append(f'{p.name} cell {i} mixes imports with other code, so the docs build runs it out of '
                           'context: put its imports in a cell of their own')
    return out

def main(nbs='nbs'):
    paths = sorted(Path(nbs).glob('[0-9][0-9]_*.ipynb'))
    problems = (layout_problems(paths) + output_problems(paths + [Path(nbs)/'index.ipynb'])
                + doc_run_problems(paths))
    for x in problems: print(x)
    print(f'{len(paths)} notebooks: ' + ('layout, kernelspec, outputs and docs-time cells ok' if not problems
                                         else f'{len(problems)} problems; '
                                              'outputs are refreshed with `python tools/refresh_notebooks.py`'))
    return 1 if problems else 0

if __name__ == '__main__': sys.exit(main(*sys.argv[1:]))
