"""Copy nbs/81_results.ipynb, without outputs, to ppo_trt/templates/report.ipynb
(the template `ppo-trt report` executes).

CI runs this and fails if it changes a file: the results page and every run's report are the same notebook."""
import json
from pathlib import Path

def strip(nb):
    "The notebook with no outputs, execution counts or cell ids' churn."
    for c in nb['cells']:
        if c['cell_type'] == 'code': c['outputs'], c['execution_count'] = [], None
    nb['metadata'] = dict(kernelspec=dict(name='python3', display_name='Python 3', language='python'))
    return nb

if __name__ == '__main__':
    src, dst = Path('nbs/81_results.ipynb'), Path('ppo_trt/templates/report.ipynb')
    dst.parent.mkdir(exist_ok=True)
    text = json.dumps(strip(json.loads(src.read_text())), indent=1, ensure_ascii=False) + '\n'
    if not dst.exists() or dst.read_text() != text: dst.write_text(text); print(f'wrote {dst}')
