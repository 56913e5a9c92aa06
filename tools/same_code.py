"""Check that reformatting a notebook's code cells changed nothing but layout (and docstrings):

    python tools/same_code.py nbs/40_bench.ipynb [REV]     # against git REV (default HEAD)

Every code cell is compared with the same cell (by id) at REV through its AST, with docstrings blanked: wrapping a line,
splitting a string literal into adjacent literals or an f-string into adjacent f-strings give the same AST; anything
else is reported. Also lists the lines still over 120 characters. Exit status 1 on any difference."""
import ast, json, subprocess, sys

def _blank_docstrings(tree):
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)):
                first.value.value = ''
    return tree

def _code(src):
    "The cell's AST dump (directives and magics dropped), or None when it does not parse."
    lines = [l for l in src.split('\n') if not l.lstrip().startswith(('%', '!'))]
    try: return ast.dump(_blank_docstrings(ast.parse('\n'.join(lines))))
    except SyntaxError: return None

def cells(nb): return {c['id']: ''.join(c['source']) for c in nb['cells'] if c['cell_type'] == 'code'}

def main(path, rev='HEAD'):
    new = cells(json.load(open(path)))
    old = cells(json.loads(subprocess.run(['git', 'show', f'{rev}:{path}'],
                                          capture_output=True, text=True, check=True).stdout))
    bad = [cid for cid in new if cid in old and _code(new[cid]) != _code(old[cid])]
    bad += ([f'{cid} (new cell)' for cid in new if cid not in old]
            + [f'{cid} (cell removed)' for cid in old if cid not in new])
    long = [(cid, l) for cid, s in new.items() for l in s.split('\n') if len(l) > 120]
    for b in bad: print(f'CHANGED {b}')
    for cid, l in long: print(f'LONG {cid} ({len(l)}): {l[:100]}...')
    print(f'{path}: {len(bad)} cells changed beyond layout, {len(long)} lines over 120')
    return 1 if bad else 0

if __name__ == '__main__': sys.exit(main(*sys.argv[1:]))
