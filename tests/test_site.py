"""The documentation site in a real browser: `ppo-trt docs` builds it, headless Chromium (Debian's `chromium`, driven by
playwright, no browser download) loads every page from file:// and from a local server with every other request
aborted, and checks: no console errors, every image decoded, every internal link and anchor resolves, search answers,
the results page shows the latency table, a run's report page shows its records' text as text, and no file points at
the network; at a 1400 px window and a 390 px phone no page scrolls sideways and every table shows all its columns (or
scrolls in its own box with its first column in view); at 1400 px no figure is shrunk below 60 % of its size and a
pair of figures sits side by side, on the phone every figure takes the column's width and a pair stacks; no cell is
empty or shows an `In [ ]:` prompt, no page shows an import cell unfolded, each page's navigation entry is its title,
the sidebar's title never covers an entry, the results open with at most a dozen headline claims, and no figure of the
report has its legend over the data."""
import functools, http.server, os, re, shutil, subprocess, sys, threading
from pathlib import Path
from urllib.parse import unquote, urlsplit
from urllib.request import url2pathname
import pytest
from test_hostile_html import hostile_run, reader_sees, table_widths, RAW, SHOWN, READ, HOSTILE_NAME

from conftest import CHROMIUM
ROOT = Path(__file__).parents[1]
pytestmark = [pytest.mark.browser, pytest.mark.slow,  # builds the whole site: `pytest -m slow`
              pytest.mark.skipif(not CHROMIUM,
                                 reason="no Chromium on this machine: apt-get install -y chromium (CI installs it)"),
              pytest.mark.skipif(not (ROOT/'nbs').is_dir(), reason='the site is built from a clone (nbs/ missing)')]
SEARCHES = [('check_obs', 'check_obs'), ('lineage', 'records')]


@pytest.fixture(scope='session')
def site(tmp_path_factory):
    "The site, built once by the console script, with the report of a run whose records hold markup as a page."
    out = tmp_path_factory.mktemp('site')
    exe = shutil.which('ppo-trt') or str(Path(sys.executable).with_name('ppo-trt'))
    run = hostile_run(tmp_path_factory.mktemp('hostile'))
    r = subprocess.run([exe, 'docs', '--out', str(out), '--run-dir', str(run)], capture_output=True, text=True,
                       cwd=ROOT)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    return out


@pytest.fixture(scope='session')
def server(site):
    handler = functools.partial(type('Quiet', (http.server.SimpleHTTPRequestHandler,),
                                     {'log_message': lambda *a: None}), directory=str(site))
    srv = http.server.ThreadingHTTPServer(('127.0.0.1', 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f'http://127.0.0.1:{srv.server_address[1]}'
    srv.shutdown(); srv.server_close()


class Watched:
    "A browser context whose non-local requests are aborted and whose errors are collected."
    def __init__(self, browser, base):
        self.ctx = browser.new_context(service_workers='block')
        self.page = self.ctx.new_page()
        self.errors, self.blocked = [], []
        local = ('file:', 'data:', 'blob:', 'about:') + ((base,) if base.startswith('http') else ())
        def route(r):
            if r.request.url.startswith(local): r.continue_()
            else: self.blocked.append(r.request.url); r.abort()
        self.ctx.route('**/*', route)
        self.page.on('console', lambda m: m.type == 'error' and self.errors.append(f'console: {m.text}'))
        self.page.on('pageerror', lambda e: self.errors.append(f'pageerror: {e}'))
        self.page.on('requestfailed',  # one the next navigation cancelled (a favicon, say) did not fail
                     lambda r: r.url not in self.blocked and r.failure != 'net::ERR_ABORTED'
                     and self.errors.append(f'requestfailed: {r.url} ({r.failure})'))
        self.page.on('response', lambda r: r.status >= 400 and self.errors.append(f'HTTP {r.status}: {r.url}'))


@pytest.fixture(params=['file', 'http'])
def base(request, site, server): return site.as_uri() if request.param == 'file' else server


def _path(site, url):
    "(file in the site, fragment) of a file:// or local http URL."
    u = urlsplit(url)
    p = Path(url2pathname(u.path)) if u.scheme == 'file' else site/unquote(u.path).lstrip('/')
    return (p/'index.html' if p.is_dir() else p), unquote(u.fragment)


def _ids(p): return set(re.findall(r'\s(?:id|name)="([^"]+)"', p.read_text(encoding='utf-8', errors='replace')))


def test_every_page(site, base, browser):
    pages = sorted(p.relative_to(site).as_posix() for p in site.rglob('*.html'))
    assert len(pages) >= 25 and 'results.html' in pages and 'index.html' in pages
    w, problems = Watched(browser, base), []
    for page in pages:
        if page == '404.html' and base.startswith('file'): continue  # site-absolute paths: served over http only
        w.errors.clear()
        # the search worker too, before the next page cancels it
        w.page.goto(f'{base}/{page}', wait_until='networkidle')
        w.page.evaluate('''async () => { const imgs = [...document.images]; imgs.forEach(i => i.loading = 'eager');
            await Promise.all(imgs.map(i => i.complete ? null : new Promise(r => {
                i.onload = i.onerror = r; setTimeout(r, 5000); }))); }''')
        bad_imgs = [s[:80] for s, width in w.page.evaluate('() => [...document.images]'
                                                           '.map(i => [i.currentSrc || i.src, i.naturalWidth])')
                    if not width]
        refs = w.page.evaluate('''() => [...document.querySelectorAll('a[href]')].map(a => a.href)
            .concat([...document.querySelectorAll('link[href]')].filter(l => !/^(canonical|alternate)$/.test(l.rel))
                .map(l => l.href))
            .concat([...document.querySelectorAll('script[src], img[src]')].map(e => e.src))''')
        for r in refs:
            if not r.startswith(base): continue  # external links (e.g. to the source on GitHub) are not followed
            p, frag = _path(site, r)
            if not p.is_file(): problems.append(f'{page}: broken link {r}')
            elif frag and p.suffix == '.html' and frag not in _ids(p):
                problems.append(f'{page}: no anchor {frag!r} in {p.name}')
        problems += [f'{page}: {e}' for e in w.errors] + [f'{page}: image not loaded {s}' for s in bad_imgs]
    problems += [f'network request: {u}' for u in w.blocked]
    w.ctx.close()
    assert not problems, '\n'.join(problems[:30])


@pytest.mark.parametrize('query,expect', SEARCHES)
def test_search(site, base, browser, query, expect):
    w = Watched(browser, base)
    w.page.goto(f'{base}/index.html', wait_until='load')
    w.page.click('.md-search__input')
    w.page.locator('.md-search__input').press_sequentially(query, delay=30)  # Material searches on key events
    w.page.locator('.md-search-result__item').first.wait_for(state='visible', timeout=10000)
    texts = w.page.locator('.md-search-result__item').all_inner_texts()
    assert any(expect.lower() in t.lower() for t in texts), texts
    assert not w.blocked and not w.errors, (w.blocked, w.errors)
    w.ctx.close()


WINDOW, PHONE = dict(width=1400, height=900), dict(width=390, height=844)
LAYOUT = """() => {
  const article = document.querySelector('article.md-content__inner');
  const box = t => { // the box that shows the table: the nearest one that clips it, else the content column
    for (let p = t.parentElement; p && p !== article; p = p.parentElement)
      if (getComputedStyle(p).overflowX !== 'visible') return p;
    return article; };
  const scrolls = b => /^(auto|scroll)$/.test(getComputedStyle(b).overflowX) && b !== article;
  const sticky = t => { const c = t.querySelector('tr > :first-child');
    return !!c && getComputedStyle(c).position === 'sticky'; };
  const cue = t => { const b = box(t);  // a shadow drawn on the side with more
    return b !== article && getComputedStyle(b).backgroundImage.includes('gradient'); };
  const tables = [...article.querySelectorAll('table')].filter(t => t.offsetParent !== null).map(t => {
    const b = box(t), w = t.getBoundingClientRect().width;
    return {width: Math.round(w), box: b.clientWidth, fits: w <= b.clientWidth + 1, scrolls: scrolls(b) && sticky(t),
            cue: cue(t),
            head: [...t.querySelectorAll('th')].slice(0, 3).map(h => h.innerText).join(' | ')}; });
  const images = [...article.querySelectorAll('img')].filter(i => i.offsetParent !== null && i.naturalWidth).map(i => {
    const size = Math.min(i.naturalWidth, Number(i.getAttribute('width')) || Infinity); // width=: drawn for 2x screens
    const width = i.getBoundingClientRect().width, tick = Number(i.dataset.tickPx) || null;
    return {scale: width / size, alt: i.alt.slice(0, 60), zoom: !!i.closest('a.glightbox'),
            tick: tick && tick * width / i.naturalWidth,  // the smallest tick label as shown, in CSS px
            full: width >= Math.min(size, article.clientWidth) - 2}; });  // as wide as the column, or as drawn
  const lines = e => { const r = document.createRange(); r.selectNodeContents(e);  // the text's lines, by their tops
    return new Set([...r.getClientRects()].filter(x => x.width > 0).map(x => Math.round(x.top))).size; };
  const wrapped = [...article.querySelectorAll('table code, table td')].filter(e => e.offsetParent !== null)
    .filter(e => e.tagName === 'CODE' || /^\S+\s±\s\S+$/.test(e.innerText.trim()))  // a name, or a figure ± spread
    .filter(e => lines(e) > 1).map(e => e.innerText.trim().slice(0, 40));
  const rows = [...article.querySelectorAll('.figure-row')].map(r => [...r.querySelectorAll('img')]
    .filter(i => i.offsetParent !== null).map(i =>  // the drawing this width shows
    Math.round(i.getBoundingClientRect().top)));  // a pair side by side: the same top
  const importLine = /^(import |from \\S+ import |\\s|\\)|$)/;
  const imports = [...article.querySelectorAll('.jp-InputArea')].filter(a => a.offsetParent !== null)
    .map(a => a.innerText.trim()).filter(t => t && t.split('\\n').every(l => importLine.test(l)));
  const said = [...article.querySelectorAll('h2')].find(h => h.innerText.startsWith('What the numbers say'));
  let list = said && said.nextElementSibling;
  while (list && list.tagName !== 'UL') list = list.nextElementSibling;
  const cells = [...article.querySelectorAll('.jp-Cell')].filter(c => !c.innerText.trim() && !c.querySelector('img'));
  const prompts = [...article.querySelectorAll('.jp-InputPrompt, .jp-OutputPrompt')].filter(p => p.innerText.trim());
  const active = document.querySelector('.md-nav--primary .md-nav__link--active');
  return {tables, images, rows, imports, wrapped, empty_cells: cells.length, prompts: prompts.length,
          width: article.clientWidth,
          overflow: document.documentElement.scrollWidth - innerWidth, headlines: list ? list.children.length : null,
          h1: [...article.querySelectorAll('h1')].map(h => h.innerText.replace(/¶$/, '').trim()),
          h1_outputs: article.querySelectorAll('.jp-OutputArea h1').length,
          nav: active ? active.innerText.trim() : null}; }"""


def _layout(site, browser, viewport):
    "What each page looks like in a window of `viewport` (file://): its tables, figures, cells, titles, navigation."
    ctx = browser.new_context(viewport=viewport, service_workers='block')
    page, seen = ctx.new_page(), {}
    for p in sorted(site.glob('*.html')):
        if p.name == '404.html': continue
        page.goto(p.as_uri(), wait_until='load')
        seen[p.name] = page.evaluate(LAYOUT)
    ctx.close()
    return seen


@pytest.fixture(scope='module')
def layout(site, browser): return _layout(site, browser, WINDOW)


@pytest.fixture(scope='module')
def phone(site, browser): return _layout(site, browser, PHONE)


def test_no_page_scrolls_sideways(layout, phone):
    wide = [f"{page} at {w} px: {s['overflow']} px too wide" for w, seen in ((1400, layout), (390, phone))
            for page, s in seen.items() if s['overflow'] > 0]
    assert not wide, '\n'.join(wide)


def test_on_a_phone_tables_scroll_in_their_own_box_and_figures_take_the_column(phone):
    cut = [f"{page}: table [{t['head']}] is {t['width']} px in a {t['box']} px box"
           for page, s in phone.items() for t in s['tables'] if not (t['fits'] or t['scrolls'])]
    assert not cut, '\n'.join(cut)
    assert sum(not t['fits'] for t in phone['results.html']['tables']) >= 3  # the wide ones scroll, first column stays
    narrow = [f"{page}: {i['alt']!r} at {i['scale']:.0%} of its size" for page, s in phone.items()
              for i in s['images'] if not i['full']]
    assert not narrow, '\n'.join(narrow)
    rows = phone['results.html']['rows']
    assert len(rows) >= 3 and all(len(set(tops)) == len(tops) for tops in rows), rows  # each pair: one under the other


def test_on_a_phone_ticks_are_readable_tables_say_they_scroll_and_nothing_breaks_inside(phone):
    ticks = [(page, i['alt'], i['tick']) for page, s in phone.items() for i in s['images'] if i['tick'] is not None]
    assert len(ticks) >= 20, ticks  # every figure of the results and the report says its tick size
    small = [f"{page}: {alt!r}: ticks {t:.1f} px" for page, alt, t in ticks if t < 9]
    assert not small, '\n'.join(small)
    quiet = [f"{page}: table [{t['head']}] scrolls with no cue" for page, s in phone.items() for t in s['tables']
             if not t['fits'] and not t['cue']]
    assert not quiet, '\n'.join(quiet)
    broken = [f"{page}: {w!r} over two lines" for page, s in phone.items() for w in s['wrapped']]
    assert not broken, '\n'.join(broken[:20])


def test_a_pair_of_figures_sits_side_by_side_on_a_wide_screen(layout):
    rows = layout['results.html']['rows']
    assert len(rows) >= 3 and all(len(tops) == 2 and len(set(tops)) == 1 for tops in rows), rows


def test_pages_start_with_their_explanation_not_their_imports(site, layout):
    shown = {page: s['imports'] for page, s in layout.items() if s['imports']}
    assert not shown, shown
    html = (site/'fast_ppo.html').read_text(encoding='utf-8')
    assert html.count('<details class="imports">') >= 2 and '<details class="imports" open' not in html


def test_results_open_with_the_headline_claims(layout):
    assert 5 <= layout['results.html']['headlines'] <= 11, layout['results.html']['headlines']


def test_the_sidebar_title_never_covers_an_entry(site, browser):
    page = browser.new_page(viewport=WINDOW)
    page.goto((site/'fast_ppo.html').as_uri(), wait_until='load')
    at_load, covered = page.evaluate("""() => {
        const title = document.querySelector('.md-nav--primary > .md-nav__title');
        const wrap = title.closest('.md-sidebar__scrollwrap'), at_load = wrap.scrollTop, covered = [];
        const look = () => { const r = title.getBoundingClientRect();
            covered.push(...[...document.querySelectorAll('.md-nav--primary .md-nav__link')].filter(a => {
                const q = a.getBoundingClientRect(); return q.height && q.bottom > r.top + 1 && q.top < r.bottom - 1; })
                .map(a => `${wrap.scrollTop}: ${a.innerText.trim()}`)); };
        look();
        for (const y of [137, 600, 1500, wrap.scrollHeight]) { wrap.scrollTop = y; look(); }
        return [at_load, covered]; }""")
    page.close()
    assert at_load > 0  # Material scrolled the long navigation to this page's entry: entries pass the title's place
    assert not covered, covered


def test_no_legend_of_the_report_lies_over_its_data():
    from ppo_trt.results import report as R
    recs = R.load_records(ROOT/'nbs'/'_reference'/'hopper')
    cur = R.current_bench(recs.bench, recs.policy_sha256)
    figures = {'latency CDF': R.plot_latency_cdf(cur), 'latency tail': R.plot_latency_tail(cur),
               'throughput': R.plot_throughput(cur), 'cost per action': R.plot_cost_per_action(cur),
               'delay': R.plot_delay_curve(recs.evaluate.delay_curve),
               'residual': R.plot_residual_study(recs.residual_studies[0]),
               'learning curve': R.plot_learning_curve(recs.train_log, recs.train),
               'sweep delay': R.plot_sweep_delay(recs.sweep), 'sweep curves': R.plot_sweep_curves(recs.sweep),
               'curriculum': R.plot_sweep_curriculum(recs.sweep), 'robust delay': R.plot_sweep_delay(recs.robust),
               'robust curves': R.plot_sweep_curves(recs.robust), 'ADR ranges': R.plot_adr_ranges(recs.robust)}
    covered = {name: R.legend_overlaps(f) for name, f in figures.items() if R.legend_overlaps(f)}
    assert not covered, covered


def test_every_table_shows_all_its_columns(layout):
    cut = [f"{page}: table [{t['head']}] is {t['width']} px in a {t['box']} px box"
           for page, s in layout.items() for t in s['tables'] if not (t['fits'] or t['scrolls'])]
    assert sum(len(s['tables']) for s in layout.values()) >= 50 and not cut, '\n'.join(cut)
    wide = [f"{page}: table [{t['head']}] is {t['width']} px in a {t['box']} px box"
            for page in ('results.html', 'index.html') for t in layout[page]['tables'] if not t['fits']]
    assert not wide, '\n'.join(wide)  # the pages a reader reads first: every column without scrolling


def test_every_figure_is_shown_at_a_readable_size(layout):
    small = [f"{page}: {i['alt']!r} at {i['scale']:.0%} of its size" for page, s in layout.items()
             for i in s['images'] if i['scale'] < 0.6]
    assert not small, '\n'.join(small)
    figures = [i for s in layout.values() for i in s['images']]
    assert len(figures) >= 20 and all(i['zoom'] for i in figures)  # every figure enlarges on a click


def test_pages_have_one_title_no_prompts_no_empty_cells(layout):
    titled_once = lambda s: len(s['h1']) - s['h1_outputs'] == 1 or len(s['h1']) == 1  # a demo's output may show one
    bad = [f"{page}: {s['prompts']} prompts, {s['empty_cells']} empty cells, titles {s['h1']}"
           for page, s in layout.items() if s['prompts'] or s['empty_cells'] or not titled_once(s)]
    assert not bad, '\n'.join(bad)
    named = {page: (s['nav'], s['h1'][0]) for page, s in layout.items()
             if page not in ('index.html', 'run_report.html')}  # the README's title and a run's own
    assert all(nav == h1 for nav, h1 in named.values()), {p: t for p, t in named.items() if t[0] != t[1]}
    assert named['results.html'] == ('Results', 'Results') and layout['results.html']['h1'] == ['Results']
    assert named['report.html'][0] == 'Report (API)'
    assert named['bench.html'][0] == 'Latency benchmark'  # a title, not the module's name


def test_navigation_has_one_results_entry_after_home(site, browser):
    page = browser.new_page(viewport=WINDOW)
    page.goto((site/'bench.html').as_uri(), wait_until='load')
    top = page.evaluate("""() => [...document.querySelectorAll('.md-nav--primary > .md-nav__list > .md-nav__item')]
        .map(li => li.querySelector('a, label').innerText.trim())""")
    links = page.evaluate("""() => [...document.querySelectorAll('.md-nav--primary a.md-nav__link')]
        .map(a => [a.innerText.trim(), a.getAttribute('href')])""")
    page.close()
    assert top[:6] == ['Home', 'Results', 'Run report', 'Guide', 'Developing ppo_trt', 'Glossary'], top
    assert top[6:8] == ['Core', 'Environments'], top
    assert [t for t, h in links if h.split('#')[0] == 'results.html'] == ['Results'], links


def test_a_figure_enlarges_on_a_click(site, browser):
    w = Watched(browser, site.as_uri())
    w.page.set_viewport_size(WINDOW)
    w.page.goto(f'{site.as_uri()}/results.html', wait_until='load')
    fig = w.page.locator('a.glightbox img').first
    shown = fig.bounding_box()['width']
    fig.click()
    big = w.page.locator('.glightbox-container .gslide.current img')
    big.wait_for(state='visible', timeout=5000)
    w.page.wait_for_timeout(600)  # the zoom animation
    assert big.bounding_box()['width'] > shown * 1.05 and big.evaluate('i => i.naturalWidth') > 0
    assert not w.blocked and not w.errors, (w.blocked, w.errors)
    w.ctx.close()


def test_results_page_shows_the_latency_table(site, browser):
    w = Watched(browser, site.as_uri())
    w.page.goto(f'{site.as_uri()}/results.html', wait_until='load')
    text = w.page.inner_text('body')
    assert 'Batch-1 latency' in text and 'What the numbers say' in text and 'native-c' in text
    headers = w.page.evaluate("() => [...document.querySelectorAll('table th')].map(th => th.innerText)")
    assert any('p99' in h for h in headers) and any('hot path' in h for h in headers), headers
    assert w.page.evaluate("() => [...document.images].filter(i => i.alt && i.naturalWidth > 0).length") >= 3
    w.ctx.close()


_CDNS = r'(?:fonts\.googleapis|fonts\.gstatic|cdnjs\.|cdn\.jsdelivr)'
_EXTERNAL = [r'<script\b[^>]*\bsrc\s*=\s*["\']?(?:https?:)?//',
             r'<link\b[^>]*rel\s*=\s*["\']?stylesheet[^>]*href\s*=\s*["\']?(?:https?:)?//',
             r'@import\s+(?:url\()?\s*["\']?(?:https?:)?//']
# a CDN's name anywhere in a style sheet or script; in a page only inside a tag (escaped text that names one is text)
_CDN_IN = {'.css': _CDNS, '.js': _CDNS, '.html': r'<[a-z][^<>]*' + _CDNS}
# in Material's bundle, never loaded here
_ALLOWED = ('https://unpkg.com/resize-observer-polyfill', 'https://unpkg.com/mermaid@')


def test_no_file_points_at_the_network(site):
    hits = []
    for f in site.rglob('*'):
        if f.suffix not in ('.html', '.css', '.js') or f.relative_to(site).parts[0] == 'search': continue
        s = re.sub(r'/\*!.*?\*/', '', f.read_text(encoding='utf-8', errors='replace'), flags=re.S)
        for pat in _EXTERNAL + [_CDN_IN[f.suffix]]:
            hits += [f'{f.name}: {s[max(0, m.start() - 40):m.end() + 40]}' for m in re.finditer(pat, s, flags=re.I)
                     if not any(a in s[m.start() - 10:m.end() + 40] for a in _ALLOWED)]
    assert not hits, '\n'.join(hits[:20])


def test_run_report_page_shows_record_text_as_text(site, browser):
    html = (site/'run_report.html').read_text(encoding='utf-8')
    assert not [x for x in RAW if x in html] and html.count(SHOWN) >= 10
    assert all(len(w) == 1 for w in table_widths(html)), table_widths(html)
    seen = reader_sees(browser, (site/'run_report.html').as_uri())
    assert seen['dialogs'] == [] and seen['images'] == 0 and set(seen['widths']) == {1}, seen['dialogs']
    assert HOSTILE_NAME in seen['text'] and READ in seen['text'], seen['text'][:2000]


def test_site_is_marked_and_nothing_is_left_beside_it(site):
    from ppo_trt.results.site import made_by_docs
    assert made_by_docs(site) and not [p.name for p in site.parent.iterdir() if p.name.startswith(f'.{site.name}.')]
