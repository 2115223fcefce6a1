"The docs site, built from every notebook's stored outputs, links only to pages and files it holds."
import re
from html.parser import HTMLParser
from pathlib import Path
import pytest

class _Links(HTMLParser):
    "The href and src attributes of the real tags of a page (escaped markup inside code is text, not a link)."
    def __init__(self):
        super().__init__(); self.found = []
    def handle_starttag(self, tag, attrs):
        self.found += [v for k, v in attrs if k in ('href', 'src') and v]

def page_links(html:str) -> list:
    p = _Links(); p.feed(html); return p.found

def dead_links(site:Path, skip=('static/',)) -> dict:
    "{page: relative targets that are not files of `site`}; `skip`: folder prefixes left out (the fetched web assets)."
    out = {}
    for f in sorted(site.rglob('*.html')):
        bad = []
        for t in page_links(f.read_text()):
            t = re.split(r'[#?]', t)[0]
            if not t or re.match(r'[a-zA-Z][\w+.-]*:', t) or t.startswith('//'): continue
            target = (f.parent / t).resolve()
            rel = target.relative_to(site.resolve()).as_posix() if target.is_relative_to(site.resolve()) else t
            if rel.startswith(skip): continue
            if not target.exists(): bad.append(t)
        if bad: out[f.relative_to(site).as_posix()] = sorted(set(bad))
    return out

def test_dead_links_reads_real_tags_only(tmp_path):
    (tmp_path / 'a.html').write_text('<a href="b.html#x">b</a> <img src="gone.png"> <code>&lt;a href="nope.html"&gt;</code>'
                                     '<script src="static/require.js"></script><a href="https://example.org">e</a>')
    (tmp_path / 'b.html').write_text('<a href="a.html">a</a>')
    assert dead_links(tmp_path) == {'a.html': ['gone.png']}

@pytest.fixture(scope='module')
def site(tmp_path_factory):
    from simreal_nb.face.docs import build_docs
    out = tmp_path_factory.mktemp('site_all')
    b = build_docs(out, execute=False, assets=False, verbose=False)  # every notebook, as committed
    assert not b.failed, [(p.notebook, p.error) for p in b.failed]
    return out

def test_every_link_of_the_site_resolves(site):
    pages = {p.relative_to(site).as_posix() for p in site.rglob('*.html')}
    assert {'index.html', 'findings.html', 'running.html', 'tutorials/full_experiment.html'} <= pages
    assert dead_links(site) == {}

class _Outputs(HTMLParser):
    "The text of a page's cell outputs (elements of class jp-OutputArea-output), not of its code."
    def __init__(self):
        super().__init__(); self.depth, self.text = 0, []
    def handle_starttag(self, tag, attrs):
        if self.depth or 'jp-OutputArea-output' in (dict(attrs).get('class') or ''): self.depth += tag not in ('br', 'img', 'input', 'meta', 'link')
    def handle_endtag(self, tag):
        if self.depth: self.depth -= 1
    def handle_data(self, data):
        if self.depth: self.text.append(data)

def output_text(html:str) -> str:
    p = _Outputs(); p.feed(html); return ''.join(p.text)

def test_output_text_leaves_code_out():
    html = ('<div class="jp-InputArea"><pre>x = "W(children=(A"</pre></div>'
            '<div class="jp-RenderedText jp-OutputArea-output"><pre>W(children=(B<br>more</pre></div><p>after</p>')
    assert output_text(html) == 'W(children=(Bmore'

def test_no_page_shows_a_widget_as_its_repr(site):
    "Built from stored outputs (no widget state), a widget is a note saying how to use it, not `LambdaInspector(children=(…`."
    shown = [p.name for p in site.rglob('*.html') if re.search(r'\w+\(children=\(', output_text(p.read_text()))]
    assert not shown, shown
    assert 'An interactive widget' in (site / 'tutorials' / 'lambda_inspector.html').read_text()
