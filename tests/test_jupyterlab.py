"""JupyterLab opens a notebook of this repository unmodified: a real `jupyter lab` (the server with the configuration pip
installs, `jupyter-config/`, and nothing from the tester's own ~/.jupyter), a committed notebook opened in headless
Chromium (Debian's `chromium`, driven by playwright), its kernel started; the document's tab is not marked modified,
and the file on disk is unchanged. With ppo_trt's server extension disabled the same notebook opens modified (what
every notebook did before it), so the check can fail."""
import hashlib, os, shutil, socket, subprocess, sys, time, uuid
from contextlib import contextmanager
from pathlib import Path
from urllib.request import urlopen
import pytest

CHROMIUM = os.environ.get('CHROMIUM') or shutil.which('chromium') or shutil.which('chromium-browser')
ROOT = Path(__file__).parents[1]
NOTEBOOK = 'nbs/00_files.ipynb'
EXTENSION = 'ppo_trt.results.jupyter'
pytestmark = [pytest.mark.browser, pytest.mark.slow,  # starts JupyterLab and a kernel: `pytest -m slow`
              pytest.mark.skipif(not CHROMIUM,
                                 reason="no Chromium on this machine: apt-get install -y chromium (CI installs it)"),
              pytest.mark.skipif(not (ROOT/NOTEBOOK).is_file(), reason='the notebooks are in a clone (nbs/ missing)')]


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


def opened_modified(url, notebook):
    "Open `notebook` in JupyterLab, wait for its kernel to be idle and a moment more; whether its tab shows it modified."
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=['--no-sandbox', '--disable-gpu'])
        page = browser.new_page(viewport=dict(width=1400, height=900))
        page.goto(f'{url}/lab/workspaces/t{uuid.uuid4().hex[:8]}/tree/{notebook}?reset', wait_until='domcontentloaded')
        panel = '.jp-NotebookPanel:not(.lm-mod-hidden)'
        page.wait_for_selector(f'{panel} .jp-Notebook-ExecutionIndicator[data-status="idle"]', timeout=90_000)
        page.wait_for_timeout(3000)  # JupyterLab writes the kernel's metadata just after the kernel is ready
        tab = page.locator('.lm-TabBar-tab.jp-mod-current')
        assert Path(notebook).name in tab.inner_text()
        modified = 'jp-mod-dirty' in tab.get_attribute('class')
        browser.close()
    return modified


def _sha(p): return hashlib.sha256(p.read_bytes()).hexdigest()


def test_a_notebook_opens_unmodified(tmp_path):
    before = _sha(ROOT/NOTEBOOK)
    with jupyter_lab(tmp_path) as url:
        assert not opened_modified(url, NOTEBOOK)
    assert _sha(ROOT/NOTEBOOK) == before


def test_without_the_extension_it_opens_modified(tmp_path):
    with jupyter_lab(tmp_path, extension=False) as url:
        assert opened_modified(url, NOTEBOOK)  # JupyterLab writes the kernel's display name and language_info
