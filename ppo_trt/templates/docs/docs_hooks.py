"""mkdocs hooks for notebook pages rendered by mkdocs-jupyter (see mkdocs.yml `hooks:`).

1. No CDN scripts: nbconvert's HTML template always emits a MathJax <script src=...> (+ its
   x-mathjax-config block; with `custom_mathjax_url: ""` the src is empty, otherwise a CDN URL)
   and a <script type="module"> that imports mermaid from cdnjs. The notebooks use neither
   math nor mermaid, so both are removed.
2. Unique heading ids: nbconvert gives two headings with the same text the same id, while
   the page TOC (python-markdown's toc) numbers them `x`, `x_1`, `x_2`; renumber the HTML the
   same way so every TOC entry lands on its heading.
3. Method anchors: nbdev's symbol links (`RunDir.require` -> page.html#rundir.require) point at
   an anchor that only exists when that method has its own show_doc; otherwise point them at
   the class (`#rundir`), which is where the method's source is shown.
4. One copy of each inline figure: mkdocs-glightbox links every image to its own `src`, which
   for a notebook's figures is the whole PNG as a data: URL, so each page carried its figures
   twice; the link's copy is dropped and set from its image in the browser before GLightbox starts.
"""
import re
from pathlib import Path

_mathjax = re.compile(r'<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->', re.S)
_empty_src = re.compile(r'<script src="">\s*</script>')
_mermaid = re.compile(r'<script type="module">(?:(?!</script>).)*?cdnjs\.cloudflare\.com'
                      r'(?:(?!</script>).)*</script>', re.S)
_heading = re.compile(r'<(h[1-6]) id="([^"]+)"(.*?)</\1>', re.S)
_idcount = re.compile(r'^(.*)_([0-9]+)$')


def _unique(id_, seen):   # python-markdown toc.unique
    while id_ in seen or not id_:
        m = _idcount.match(id_)
        id_ = f'{m.group(1)}_{int(m.group(2)) + 1}' if m else f'{id_}_1'
    seen.add(id_)
    return id_


def _dedup_ids(html):
    seen = set()
    def f(m):
        tag, old, rest = m.groups()
        new = _unique(old, seen)
        if new == old: return m.group(0)
        return f'<{tag} id="{new}"' + rest.replace(f'href="#{old}"', f'href="#{new}"') + f'</{tag}>'
    return _heading.sub(f, html)


_data_href = re.compile(r'(<a class="glightbox"[^>]*?) href="data:[^"]*"')
_set_href = ('<script>document.querySelectorAll("a.glightbox:not([href])").forEach(a => {'
             ' const img = a.querySelector("img"); if (img) a.href = img.src; });</script>')


def _one_copy(html):
    init = '<script id="init-glightbox">'
    if init not in html: return html
    html, n = _data_href.subn(r'\1', html)
    return html.replace(init, _set_href + init, 1) if n else html


def on_post_page(output, page, config, **kw):
    output = _one_copy(output)
    if 'jupyter-wrapper' not in output: return output   # only notebook pages
    output = _mathjax.sub('', output)
    output = _empty_src.sub('', output)
    output = _mermaid.sub('', output)
    i = output.find('jupyter-wrapper')                  # renumber ids in the notebook body only
    return output[:i] + _dedup_ids(output[i:])


_ids_re = re.compile(r'\sid="([^"]+)"')
_href_re = re.compile(r'href="([^"#:?]*\.html)?#([^"]+\.[^"]+)"')


def on_post_build(config, **kw):
    site = Path(config['site_dir'])
    pages = {p.resolve(): p.read_text(encoding='utf-8') for p in site.rglob('*.html')}
    ids = {p: set(_ids_re.findall(s)) for p, s in pages.items()}
    for p, s in pages.items():
        def f(m):
            target = (p.parent/m.group(1)).resolve() if m.group(1) else p
            frag = m.group(2)
            have = ids.get(target)
            if have is None or frag in have: return m.group(0)
            cls = frag.split('.')[0]
            return f'href="{m.group(1) or ""}#{cls}"' if cls in have else m.group(0)
        new = _href_re.sub(f, s)
        if new != s: p.write_text(new, encoding='utf-8')
