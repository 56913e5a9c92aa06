"""Print a regular expression matching the notebooks that hold `#| slow` cells, for `nbdev_test --flags slow --file_re`.

The slow pass reruns only these: a notebook without a slow cell runs the same with and without the flag."""
import json, re, sys
from pathlib import Path

def slow_notebooks(nbs='nbs'):
    "Names of the notebooks in `nbs` with a code cell flagged `#| slow`."
    flagged = lambda c: c['cell_type'] == 'code' and re.search(r'^#\|\s*slow\s*$', ''.join(c['source']), re.M)
    return sorted(p.name for p in Path(nbs).glob('*.ipynb') if any(map(flagged, json.loads(p.read_text())['cells'])))

if __name__ == '__main__':
    names = slow_notebooks(*sys.argv[1:])
    print('^(' + '|'.join(re.escape(n) for n in names) + ')$' if names else '^$')
