"""Text that comes from records and files (backend names, skip reasons, providers, the run folder's name, an ONNX node's
name) reaches report.html and the docs as text, never as markup; `ppo-trt docs --out` never empties a folder it did
not make. The browser checks use Debian's Chromium through playwright, as tests/test_site.py does."""
import json, os, re, shutil
from pathlib import Path
import msgspec
import numpy as np
import pytest
from conftest import ppo_trt, CHROMIUM

os.environ.setdefault('MPLBACKEND', 'Agg')
ROOT = Path(__file__).parents[1]
REFERENCE = ROOT/'nbs'/'_reference'/'hopper'
PAYLOAD = '<img src=x onerror=alert(1)><script>alert(2)</script>|`*_[l](javascript:alert(3))'
SHOWN = '&lt;img src=x onerror=alert(1)&gt;'        # the payload as HTML text
READ = 'node <img src=x onerror=alert(1)><script>alert(2)</script>|`'  # what a reader sees of a skip reason
RAW = ('<img src=x', '<script>alert', 'javascript:alert(3)"')  # the payload as markup: never in a page
HOSTILE_NAME = 'run`<img src=x onerror=alert(1)>|x'  # a folder name cannot hold '/', so no closing tag


def hostile_run(parent):
    "A copy of the reference run whose folder name, skip reasons, a provider and the machine's names hold markup."
    d = Path(parent)/HOSTILE_NAME
    shutil.copytree(REFERENCE, d)
    b = json.loads((d/'bench.json').read_text())
    for r in b['records']:
        if not r['ran']: r['reason'] = f"backend {r['backend']} cannot run here: node {PAYLOAD}; more"
        if r['backend'] == 'ort': r['provider'] = 'CPU' + PAYLOAD
    b['machine_summary'], b['machine']['cpu'] = PAYLOAD, PAYLOAD
    (d/'bench.json').write_text(json.dumps(b))
    return d


def table_widths(html):
    "Per table, the set of its rows' cell counts: one number when no cell text split a row."
    return [{len(re.findall(r'<t[hd][ >]', row)) for row in re.findall(r'<tr>.*?</tr>', t, re.S)}
            for t in re.findall(r'<table>.*?</table>', html, re.S)]


def reader_sees(browser, url):
    "What a reader's browser makes of a page: dialogs opened, body text, row widths per table, non-data images."
    page, dialogs = browser.new_page(), []
    page.on('dialog', lambda d: (dialogs.append(d.message), d.dismiss()))
    page.route('**/*', lambda r: r.continue_() if r.request.url.startswith(('file:', 'data:')) else r.abort())
    page.goto(url, wait_until='load')
    page.wait_for_timeout(300)  # an onerror handler runs after the failed load
    seen = dict(dialogs=dialogs, text=page.inner_text('body'),
                widths=page.evaluate("() => [...document.querySelectorAll('table')]"
                                     ".map(t => new Set([...t.rows].map(r => r.cells.length)).size)"),
                images=page.evaluate("() => [...document.images].filter(i => !i.src.startsWith('data:')).length"))
    page.close()
    return seen


def _markdown_html(items):
    "The HTML nbconvert makes of what report sections return (Markdown and HTML displays)."
    from nbconvert.filters.markdown_mistune import markdown2html_mistune as md2html
    return '\n'.join(md2html(x.data) if type(x).__name__ == 'Markdown' else x.data for x in items)


KEEP = {'mode', 'session', 'created', 'policy_sha256', 'machine_id', 'schema_version',  # ids the report matches on
        'env_id'}  # an env id is refused by every record's schema unless it is [A-Za-z0-9_.:/-]: no markup fits

def _poisoned(x, key=None):
    "Every string value but the ids above, the payload appended."
    if isinstance(x, dict): return {k: _poisoned(v, k) for k, v in x.items()}
    if isinstance(x, list): return [_poisoned(v, key) for v in x]
    return x + PAYLOAD if isinstance(x, str) and key not in KEEP else x


def _renamed(x, names):
    "Every string, keys included, that is one of `names` (or 'ppo:' + one), the payload appended: names stay keys."
    def f(s):
        if not isinstance(s, str): return s
        if s in names: return s + PAYLOAD
        return s + PAYLOAD if s.startswith('ppo:') and s[4:] in names else s
    if isinstance(x, dict): return {f(k): _renamed(v, names) for k, v in x.items()}
    if isinstance(x, list): return [_renamed(v, names) for v in x]
    return f(x)


def _typed(rec, change):
    "`rec` (a record's Struct, or a list of them) with `change` applied to its JSON form, read back as its schema."
    if isinstance(rec, list): return [_typed(r, change) for r in rec]
    return msgspec.convert(change(msgspec.to_builtins(rec)), type(rec))


@pytest.mark.slow  # over 5 s: the quick suite keeps the README test command under 10 minutes
@pytest.mark.skipif(not REFERENCE.is_dir(), reason='the reference run is in a clone (nbs/_reference)')
def test_every_record_string_is_shown_as_text():
    from ppo_trt.results.report import load_records, SECTIONS
    recs = load_records(REFERENCE)
    for k in ('bench', 'train', 'export', 'env_benches', 'residual_studies'):
        setattr(recs, k, _typed(getattr(recs, k), _poisoned))
    ev, sw = recs.evaluate, recs.sweep
    recs.evaluate = _typed(ev, lambda d: _renamed(d, {*ev.backends, *(p.phase for p in ev.phases)} - {'nominal'}))
    recs.sweep = _renamed(sw, {*sw['settings']['phases']} - {'nominal'})
    recs.sweep['settings']['randomize'] = f"{sw['settings']['randomize']}{PAYLOAD}"
    recs.run_dir = f'/runs/{HOSTILE_NAME}'
    html = _markdown_html([x for section in SECTIONS for x in section(recs)])
    assert not [r for r in RAW if r in html], [html[max(0, html.find(r) - 200):html.find(r) + 80] for r in RAW]
    assert html.count(SHOWN) > 100  # the text is there, as text
    assert table_widths(html) and all(len(w) == 1 for w in table_widths(html)), table_widths(html)


def test_native_refusal_quoting_a_hostile_node_name(tmp_path):
    "The native backend refuses a graph and quotes the node's name; the report's skipped list shows it as text."
    import onnx
    from onnx import helper, TensorProto
    from ppo_trt.measure.bench import measure_backend, BenchSettings
    from ppo_trt.core.run_folder import RunDir
    from ppo_trt.results.report import skipped_list, _md
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ['batch', 3]) for n in ('obs', 'action')]
    node = helper.make_node('Add', ['obs', 'obs'], ['action'], name=PAYLOAD)  # not a chain: refused by name
    onnx.save(helper.make_model(helper.make_graph([node], 'p', io[:1], io[1:]),
                                opset_imports=[helper.make_opsetid('', 17)]), tmp_path/'policy.onnx')
    recs = measure_backend('native', RunDir(tmp_path), np.zeros((1, 3), np.float32), None, 'Hopper-v4',
                           BenchSettings())
    assert not recs[0].ran and PAYLOAD in recs[0].reason, recs
    html = _markdown_html([_md(skipped_list(recs))])
    assert not [r for r in RAW if r in html] and SHOWN in html, html


@pytest.mark.slow  # over 7 s: with the long checks (pytest -m slow tests)
@pytest.mark.skipif(not REFERENCE.is_dir(), reason='the reference run is in a clone (nbs/_reference)')
def test_report_of_a_hostile_run(tmp_path, request):
    d = hostile_run(tmp_path)
    r = ppo_trt('report', '--run-dir', d)
    assert r.returncode == 0, r.stderr[-2000:]
    html = (d/'report.html').read_text()
    body = html[html.index('<body'):]
    assert not [x for x in RAW if x in body] and body.count(SHOWN) >= 10
    assert all(len(w) == 1 for w in table_widths(body)), table_widths(body)
    if CHROMIUM:
        seen = reader_sees(request.getfixturevalue('browser'), (d/'report.html').as_uri())
        assert seen['dialogs'] == [] and seen['images'] == 0, seen['dialogs']
        assert READ in seen['text']  # shown literally
        assert f"Run folder {HOSTILE_NAME}" in seen['text'] and set(seen['widths']) == {1}


def _tree(folder):
    "Every path under `folder` (links not followed) with its bytes, or its link target."
    out = {}
    for top, dirs, files in os.walk(folder):
        for n in dirs + files:
            p = Path(top)/n
            out[p.relative_to(folder).as_posix()] = (os.readlink(p) if p.is_symlink() else
                                                     p.read_bytes() if p.is_file() else 'dir')
    return out


def _folders(tmp):
    "A user's folders and files for `docs --out` to be pointed at."
    mine = tmp/'mine'; (mine/'.git').mkdir(parents=True)
    (mine/'thesis.tex').write_text('years of work'); (mine/'.git'/'HEAD').write_text('ref: main')
    (tmp/'dots').mkdir(); (tmp/'dots'/'.config').write_text('x')
    (tmp/'link').symlink_to(mine)
    marker = tmp/'marker.json'; marker.write_text(json.dumps({'made_by': 'ppo-trt docs'}))
    (tmp/'linked_marker').mkdir(); (tmp/'linked_marker'/'notes.txt').write_text('mine')
    (tmp/'linked_marker'/'.ppo-trt-site.json').symlink_to(marker)  # a link is not the marker
    (tmp/'other_marker').mkdir(); (tmp/'other_marker'/'notes.txt').write_text('mine')
    (tmp/'other_marker'/'.ppo-trt-site.json').write_text('{"made_by": "someone else"}')


@pytest.mark.skipif(not (ROOT/'nbs').is_dir(), reason='ppo-trt docs runs in a clone (nbs/ missing)')
@pytest.mark.parametrize('out, says', [
    ('mine', 'is not empty and was not made by `ppo-trt docs`'), ('dots', 'is not empty and was not made by'),
    ('linked_marker', 'is not empty and was not made by'), ('other_marker', 'is not empty and was not made by'),
    ('link', 'is a symbolic link'), ('mine/thesis.tex', 'is a file')])
def test_docs_never_empties_a_folder_it_did_not_make(tmp_path, out, says):
    _folders(tmp_path)
    before = _tree(tmp_path)
    r = ppo_trt('docs', '--out', tmp_path/out, cwd=ROOT)
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-1500:])
    assert len(r.stderr.strip().splitlines()) == 1 and 'Traceback' not in r.stderr and says in r.stderr, r.stderr
    assert _tree(tmp_path) == before  # byte for byte, and no staging folder left beside
