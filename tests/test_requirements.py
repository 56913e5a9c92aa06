"""`pip install -e .` (README command 1) installs what the package imports: every module-level import of a ppo_trt
module (not the docs tooling, which the `docs` extra installs) comes from the standard library, ppo_trt itself, or a
distribution named in settings.ini's `requirements`."""
import ast, configparser, re, sys
from importlib.metadata import packages_distributions, requires
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS_TOOLING = {'results/signatures.py', 'results/site.py', 'results/jupyter.py'}  # `ppo_trt[docs]` / `[dev]`

def _names(spec):
    "Distribution names of requirement specifiers (`gymnasium[mujoco]>=1.1` -> gymnasium)."
    return {re.split(r'[<>=!~\[;\s]', s, 1)[0].lower().replace('_', '-') for s in spec.split() if s}

def required():
    "The distributions `pip install .` brings: settings.ini's requirements and what they require in turn."
    cfg = configparser.ConfigParser(); cfg.read(ROOT/'settings.ini')
    todo, seen = list(_names(cfg['DEFAULT']['requirements'])), set()
    while todo:
        name = todo.pop()
        if name in seen: continue
        seen.add(name)
        try: reqs = requires(name) or []
        except Exception: continue  # not installed here: its name still counts
        todo += [r for r in _names(' '.join(x.split(';')[0].replace(' ', '') for x in reqs if 'extra ==' not in x))]
    return seen

def module_imports(path):
    "Top-level packages a module imports when it is imported (module level, try/except ImportError excluded)."
    out = set()
    for node in ast.parse(path.read_text(encoding='utf-8')).body:
        if isinstance(node, ast.Import): out |= {a.name.split('.')[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module: out.add(node.module.split('.')[0])
    return out

def missing():
    "(module, import, distributions) for every module-level import no required distribution provides."
    dists, req, out = packages_distributions(), required(), []
    for p in sorted((ROOT/'ppo_trt').rglob('*.py')):
        rel = p.relative_to(ROOT/'ppo_trt').as_posix()
        if rel in DOCS_TOOLING: continue
        for name in module_imports(p):
            if name in sys.stdlib_module_names or name in ('ppo_trt', '__future__'): continue
            provided = {d.lower().replace('_', '-') for d in dists.get(name, [])}
            if not provided & req: out.append((rel, name, sorted(provided)))
    return out

def test_every_module_level_import_is_installed_by_requirements():
    assert missing() == [], 'add these to settings.ini requirements (or import them in the function that needs them)'

def test_the_check_sees_a_missing_requirement(tmp_path):
    mod = tmp_path/'m.py'
    mod.write_text('import numpy\nfrom fastcore.basics import patch\n'
                   'try:\n    import triton\nexcept ImportError: pass\n')
    assert module_imports(mod) == {'numpy', 'fastcore'}  # the guarded import is not module level
    assert 'numpy' in required() and 'nbdev' not in required()
