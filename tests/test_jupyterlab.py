"""JupyterLab opens a notebook of this repository unmodified: a real `jupyter lab` (the server with the configuration pip
installs, `jupyter-config/`, and nothing from the tester's own ~/.jupyter), a committed notebook opened in headless
Chromium (Debian's `chromium`, driven by playwright), its kernel started; the document's tab is not marked modified,
and the file on disk is unchanged. With ppo_trt's server extension disabled the same notebook opens modified (what
every notebook did before it), so the check can fail."""
import hashlib, json, os, shutil, socket, subprocess, sys, time, uuid
from contextlib import contextmanager
from pathlib import Path
from urllib.request import urlopen
import pytest

from conftest import CHROMIUM
ROOT = Path(__file__).parents[1]
NOTEBOOK = 'nbs/00_files.ipynb'
EXTENSION = 'ppo_trt.results.jupyter'
BROWSER = [pytest.mark.browser, pytest.mark.slow,  # starts JupyterLab and a kernel: `pytest -m slow`
           pytest.mark.skipif(not CHROMIUM,
                              reason="no Chromium on this machine: apt-get install -y chromium (CI installs it)"),
           pytest.mark.skipif(not (ROOT/NOTEBOOK).is_file(), reason='the notebooks are in a clone (nbs/ missing)')]


def in_browser(test):
    "Mark `test` as one that opens JupyterLab in Chromium."
    for mark in reversed(BROWSER): test = mark(test)
    return test


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


@contextmanager
def jupyter_lab(tmp, extension=True):
    "A `jupyter lab` serving the clone on a free local port, configured as pip installs ppo_trt; its URL."
    pytest.importorskip('jupyterlab', reason='pip install -e ".[dev]"')
    config = tmp/'config'  # instead of ~/.jupyter: the shipped config, as pip puts it into etc/jupyter
    shutil.copytree(ROOT/'jupyter-config', config)
    port, log = _free_port(), (tmp/'lab.log').open('w')
    env = {**os.environ, 'JUPYTER_CONFIG_DIR': str(config), 'JUPYTER_RUNTIME_DIR': str(tmp/'runtime')}
    cmd = [sys.executable, '-m', 'jupyterlab', '--no-browser', f'--port={port}', '--ip=127.0.0.1',
           '--ServerApp.token=', '--ServerApp.password=', f'--ServerApp.root_dir={ROOT}',
           f'--LabApp.workspaces_dir={tmp/"workspaces"}', f'--LabApp.user_settings_dir={tmp/"settings"}']
    if os.geteuid() == 0: cmd.append('--allow-root')
    if not extension: cmd.append(f'--ServerApp.jpserver_extensions={{"{EXTENSION}": False}}')
    lab = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f'http://127.0.0.1:{port}'
    try:
        for _ in range(120):
            try:
                urlopen(f'{url}/api/status', timeout=1); break
            except OSError: time.sleep(0.5)
        else: pytest.fail('jupyter lab did not start:\n' + (tmp/'lab.log').read_text()[-3000:])
        yield url
    finally:
        lab.terminate()  # the server shuts its kernels down
        try: lab.wait(20)
        except subprocess.TimeoutExpired: os.killpg(lab.pid, 9); lab.wait()
        log.close()


def opened_modified(browser, url, notebook):
    "Open `notebook` in JupyterLab, wait for its kernel to be idle and a moment more; whether its tab shows it modified."
    ctx = browser.new_context(viewport=dict(width=1400, height=900))
    try:
        page = ctx.new_page()
        page.goto(f'{url}/lab/workspaces/t{uuid.uuid4().hex[:8]}/tree/{notebook}?reset', wait_until='domcontentloaded')
        panel = '.jp-NotebookPanel:not(.lm-mod-hidden)'
        page.wait_for_selector(f'{panel} .jp-Notebook-ExecutionIndicator[data-status="idle"]', timeout=90_000)
        page.wait_for_timeout(3000)  # JupyterLab writes the kernel's metadata just after the kernel is ready
        tab = page.locator('.lm-TabBar-tab.jp-mod-current')
        assert Path(notebook).name in tab.inner_text()
        return 'jp-mod-dirty' in tab.get_attribute('class')
    finally: ctx.close()


def _sha(p): return hashlib.sha256(p.read_bytes()).hexdigest()


@in_browser
def test_a_notebook_opens_unmodified(browser, tmp_path):
    before = _sha(ROOT/NOTEBOOK)
    with jupyter_lab(tmp_path) as url:
        assert not opened_modified(browser, url, NOTEBOOK)
    assert _sha(ROOT/NOTEBOOK) == before


@in_browser
def test_without_the_extension_it_opens_modified(browser, tmp_path):
    with jupyter_lab(tmp_path, extension=False) as url:
        assert opened_modified(browser, url, NOTEBOOK)  # JupyterLab writes the kernel's display name and language_info


# ---- issue 44: the extension touches only this project's notebooks, and never fails a load ----------------------------
# The real contents manager of jupyter_server and the real kernelspecs, the extension installed on them as the server
# installs it (`_wrap_contents` takes the server's settings, its kernelspec manager and its log): no browser needed.
MINE = dict(kernelspec=dict(name='python3', display_name='My lab env (py3.12)', language='python'),
            language_info=dict(name='python', version='3.12.1', mimetype='text/x-python'))


def served(root, path):
    "The model a server with ppo_trt's extension, serving folder `root`, hands JupyterLab for `path`."
    import logging
    from types import SimpleNamespace
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_server.services.contents.filemanager import FileContentsManager
    from ppo_trt.results.jupyter import _wrap_contents
    cm = FileContentsManager(root_dir=str(root))
    server = SimpleNamespace(web_app=SimpleNamespace(settings=dict(contents_manager=cm)),
                             kernel_spec_manager=KernelSpecManager(), log=logging.getLogger('test'))
    _wrap_contents(server)
    return cm.get(path)


def _notebook(path, metadata):
    path.write_text(json.dumps(dict(cells=[], metadata=metadata, nbformat=4, nbformat_minor=5), indent=1) + '\n')
    return path.read_bytes()


def test_a_users_notebook_is_served_as_it_is(tmp_path):
    "A notebook of the user's, beside none of ours: its display name and language_info reach JupyterLab unchanged."
    before = _notebook(tmp_path/'mine.ipynb', MINE)
    got = served(tmp_path, 'mine.ipynb')
    assert got['content']['metadata'] == MINE and (tmp_path/'mine.ipynb').read_bytes() == before


@pytest.mark.parametrize('metadata', [dict(kernelspec='python3'), dict(kernelspec=['python3']),
                                      dict(kernelspec=dict(name=None)), dict(kernelspec=dict(name={'a': 1}))],
                         ids=['string', 'list', 'name-none', 'name-dict'])
def test_malformed_metadata_is_served_not_an_error(tmp_path, metadata):
    "A kernelspec that is a string (HTTP 500 before) or other odd metadata: served as the manager read it."
    _notebook(tmp_path/'odd.ipynb', metadata)
    got = served(tmp_path, 'odd.ipynb')
    assert got['content']['metadata'] == metadata


@pytest.mark.skipif(not (ROOT/NOTEBOOK).is_file(), reason='the notebooks are in a clone (nbs/ missing)')
def test_this_projects_notebooks_still_get_the_kernels_metadata():
    "A notebook under the checkout's nbs/: served with the kernel's metadata (what keeps it unmodified in JupyterLab)."
    from jupyter_client.kernelspec import KernelSpecManager
    from ppo_trt.results.jupyter import kernel_metadata, project_notebooks
    import ppo_trt
    assert project_notebooks() == (Path(ppo_trt.__file__).resolve().parents[1]/'nbs')
    root = Path(ppo_trt.__file__).resolve().parents[1]
    got = served(root, f'nbs/{Path(NOTEBOOK).name}')['content']['metadata']
    want = kernel_metadata(KernelSpecManager().get_kernel_spec('python3'), 'python3')
    assert {k: got[k] for k in want} == want
    assert 'language_info' not in json.loads((root/NOTEBOOK).read_text())['metadata']  # the file: as nbdev_clean left it
