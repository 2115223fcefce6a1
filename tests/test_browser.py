"""Real-browser tests (`pytest -m browser`), in headless Chromium driven by Playwright:

- static: a small docs site (`simreal_nb.face.docs.build_docs`, two notebooks, small sizes) opened page by page with every
  request outside the site refused: no console error, every figure loaded, the inspector rendered from its saved widget
  state and its λ slider working without a kernel; a screenshot of the inspector goes to runs/ci-artifacts/;
- live: Voilà on loopback serving nbs/tutorials/lambda_inspector.ipynb on a results file written here; the λ slider is
  moved and the metric changed, and the winner and values shown must equal `inspector.state_at`;
- lab: JupyterLab on loopback (its own settings, workspaces and runtime folders) opening a copy of the same tutorial,
  every cell run from the Run menu as a user runs it, the λ slider moved; the winner and values shown must equal
  `inspector.state_at`; a screenshot goes to runs/ci-artifacts/inspector_jupyterlab.png.

They need the system Chromium (Debian package `chromium`, /usr/bin/chromium; another path with $SIMREAL_CHROMIUM) and
are skipped, with that reason, only when it is absent. Playwright's own browsers are never downloaded."""
import contextlib, json, os, re, socket, subprocess, sys, time
from pathlib import Path
import pytest

CHROMIUM = Path(os.environ.get('SIMREAL_CHROMIUM', '/usr/bin/chromium'))
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not CHROMIUM.exists(), reason=f'no Chromium at {CHROMIUM}: install the Debian package '
                                 '`chromium` (apt-get install chromium) to run the browser tests')]
ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-component-update',
        '--disable-sync', '--no-first-run']
ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / 'runs' / 'ci-artifacts'  # screenshots CI keeps
TUTORIAL = ROOT / 'nbs' / 'tutorials' / 'lambda_inspector.ipynb'
SITE = ['index', 'tutorials/lambda_inspector']  # the static site's notebooks: the home page and the inspector


@pytest.fixture(scope='module')
def browser():
    from playwright.sync_api import sync_playwright  # a dev requirement: an ImportError here is a broken install, not a skip
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS, headless=True)
        yield b
        b.close()


def open_page(browser, url, local):
    "A page at `url` where requests for which `local(url)` is false are refused; its log of console errors and refused URLs."
    page = browser.new_page(viewport={'width': 1280, 'height': 1000})
    log = dict(errors=[], refused=[])
    page.on('console', lambda m: log['errors'].append(m.text) if m.type == 'error' else None)
    page.on('pageerror', lambda e: log['errors'].append(f'uncaught: {e}'))
    def route(r):
        if local(r.request.url): r.continue_()
        else: log['refused'].append(r.request.url); r.abort()
    page.route('**/*', route)
    page.goto(url)
    return page, log


def shown(view):
    "(λ, winner, {protocol: bM text}, metric) as the inspector shows them."
    rows = {r.get_attribute('data-protocol'): r.locator('.si-value').inner_text() for r in view.locator('tr[data-protocol]').all()}
    return float(view.get_attribute('data-lam')), view.locator('.si-winner').inner_text(), rows, view.get_attribute('data-metric')


def check_view(view, score, **sel):
    "The inspector's visible page equals `state_at` at its λ: the winner, and every protocol's bM(λ) ± CI as printed."
    from simreal_nb.reading.inspector import state_at, _num, _pm
    lam, winner, rows, metric = shown(view)
    st = state_at(score, lam, metric=metric, **sel)
    assert winner == (st.winner or 'none')
    assert list(rows) == st.protocols
    for p, text in rows.items(): assert text == _num(st.values[p]) + _pm(st.values[p], st.ci[p]), (p, text)
    return lam, st


def visible_view(page, **attrs):
    "The inspector page on show (the widget's Stack shows one of its 21), optionally with given data- attributes."
    sel = '.simreal-inspector' + ''.join(f'[data-{k}="{v}"]' for k, v in attrs.items())
    return page.locator(sel).filter(visible=True)


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    from simreal_nb.face.docs import build_docs
    out = tmp_path_factory.mktemp('site')
    b = build_docs(out, notebooks=SITE, small=True, timeout=300, workers=2, verbose=False)
    assert not b.failed, [(p.notebook, p.error) for p in b.failed]
    return b


def test_static_site(browser, site):
    "Every page opens with nothing from outside the site, no console error, its figures loaded and its navigation."
    pages = sorted(site.out.rglob('*.html'))
    assert [p.relative_to(site.out).as_posix() for p in pages] == ['index.html', 'tutorials/lambda_inspector.html']
    for f in pages:
        page, log = open_page(browser, f.as_uri(), lambda u: u.startswith('file:') or u.startswith('data:'))
        page.wait_for_load_state('load')
        html = f.read_text()
        if 'application/vnd.jupyter.widget-state+json' in html: visible_view(page).wait_for(timeout=30_000)
        if 'mathjax/tex-chtml.js' in html: page.locator('mjx-container').first.wait_for(timeout=30_000)
        imgs = page.evaluate("Array.from(document.querySelectorAll('main img')).map(i => [i.complete, i.naturalWidth])")
        assert all(done and w > 0 for done, w in imgs), (f.name, imgs)
        if f.name == 'lambda_inspector.html': assert len(imgs) >= 1  # the Pareto figure
        assert page.locator('nav.simreal-nav a').count() >= len(pages)
        page.wait_for_timeout(300)  # late errors
        assert not log['refused'], (f.name, log['refused'])
        assert not log['errors'], (f.name, log['errors'])
        page.close()


def test_static_inspector(browser, site):
    "The inspector renders from saved widget state, shows `state_at`'s numbers, and its λ slider works without a kernel."
    from simreal_nb.reading.inspector import inspector_demo, results_score
    study = Path(__file__).resolve().parents[1] / 'reports' / 'default' / 'scores.nc'
    score = results_score(study) if study.exists() else inspector_demo()  # what the tutorial shows: the default run's scores
    page, log = open_page(browser, (site.out / 'tutorials' / 'lambda_inspector.html').as_uri(), lambda u: u.startswith('file:'))
    view = visible_view(page); view.wait_for(timeout=30_000)
    lam0, _ = check_view(view, score, system='cylinder')
    handle = page.locator('.widget-slider .noUi-handle').first
    handle.focus(); handle.press('ArrowLeft'); handle.press('ArrowLeft')
    lam1 = round(lam0 - 0.1, 2)
    view = visible_view(page, lam=f'{lam1:.2f}'); view.wait_for(timeout=10_000)
    check_view(view, score, system='cylinder')
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    box = page.locator('.widget-vbox').filter(has=page.locator('.widget-slider')).first
    box.scroll_into_view_if_needed()
    box.screenshot(path=str(ARTIFACTS / 'inspector_static.png'))
    assert not log['errors'] and not log['refused']
    page.close()


def _free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0)); return s.getsockname()[1]


@contextlib.contextmanager
def serving(cmd, port, log_path, cwd, env, name, wait_s=60):
    "A server process started from `cmd`, its output in `log_path`, until it listens on 127.0.0.1:`port`; stopped on exit."
    with open(log_path, 'w') as log:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            t0 = time.monotonic()
            while True:
                try: socket.create_connection(('127.0.0.1', port), timeout=1).close(); break
                except OSError:
                    if proc.poll() is not None or time.monotonic() - t0 > wait_s:
                        pytest.fail(f'{name} did not start: {Path(log_path).read_text()[-2000:]}')
                    time.sleep(0.3)
            yield proc
        finally:
            proc.terminate()
            try: proc.wait(20)
            except subprocess.TimeoutExpired: proc.kill()


@pytest.fixture(scope='module')
def voila(tmp_path_factory):
    "Voilà serving the inspector tutorial on a results file of its own (`inspector_demo(seed=1)`): (url, score)."
    import voila  # noqa: F401  a dev requirement
    from simreal_nb.reading.inspector import inspector_demo
    tmp = tmp_path_factory.mktemp('voila')
    score = inspector_demo(seed=1)
    score.to_dataset(name='score').to_netcdf(tmp / 'results.nc')
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if k not in ('IN_TEST', 'MPLBACKEND')}
    env['SIMREAL_RESULTS'] = str(tmp / 'results.nc')
    with serving([sys.executable, '-m', 'voila', str(TUTORIAL), '--no-browser', f'--port={port}', '--Voila.ip=127.0.0.1',
                  '--VoilaConfiguration.show_tracebacks=True'], port, tmp / 'voila.log', cwd=TUTORIAL.parent, env=env, name='Voilà'):
        yield f'http://127.0.0.1:{port}/', score, tmp / 'voila.log'


def test_live_voila(browser, voila):
    "Under Voilà: move the λ slider and change the metric; the winner and the values shown equal `state_at`."
    url, score, vlog = voila
    page, log = open_page(browser, url, lambda u: u.startswith(url) or u.startswith('data:') or u.startswith('blob:'))
    view = visible_view(page)
    try: view.wait_for(timeout=120_000)
    except Exception: pytest.fail(f'the inspector did not appear; Voilà log: {vlog.read_text()[-3000:]}')
    lam0, _ = check_view(view, score, system='cylinder')
    handle = page.locator('.widget-slider .noUi-handle').first
    handle.focus(); handle.press('ArrowLeft'); handle.press('ArrowLeft'); handle.press('ArrowLeft')
    lam1 = round(lam0 - 0.15, 2)
    view = visible_view(page, lam=f'{lam1:.2f}'); view.wait_for(timeout=15_000)
    check_view(view, score, system='cylinder')
    metric = page.locator('.widget-dropdown').filter(has=page.get_by_text('metric', exact=True)).locator('select')
    metric.select_option('frmse')
    view = visible_view(page, lam=f'{lam1:.2f}', metric='frmse'); view.wait_for(timeout=30_000)  # the kernel recomputed the pages
    lam, st = check_view(view, score, system='cylinder')
    assert lam == lam1 and st.metric == 'frmse'
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    view.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / 'inspector_voila.png'))
    # Voilà takes only its icon fonts from a CDN (refused here); nothing else may fail
    assert all(re.search(r'\.(woff2?|ttf|eot|svg|css)(\?|$)|font', u) for u in log['refused']), log['refused']
    errors = [e for e in log['errors'] if not e.startswith('Failed to load resource')]
    assert not errors, errors
    page.close()


@pytest.fixture(scope='module')
def lab(tmp_path_factory):
    "JupyterLab on loopback (a dev requirement), serving a copy of the inspector tutorial that reads a results file of its own: (url, token, score)."
    import jupyterlab  # noqa: F401  a dev requirement
    import shutil, secrets
    from simreal_nb.reading.inspector import inspector_demo
    tmp = tmp_path_factory.mktemp('lab')
    shutil.copy(TUTORIAL, tmp / TUTORIAL.name)  # the lab saves what it runs: a copy, never the committed notebook
    score = inspector_demo(seed=2)
    score.to_dataset(name='score').to_netcdf(tmp / 'results.nc')
    port, token = _free_port(), secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if k not in ('IN_TEST', 'MPLBACKEND')}
    env.update(SIMREAL_RESULTS=str(tmp / 'results.nc'), JUPYTER_CONFIG_DIR=str(tmp / 'config'), JUPYTER_RUNTIME_DIR=str(tmp / 'runtime'))
    settings = tmp / 'settings'  # this lab's own user settings: every cell rendered (no windowing), no news prompt
    for name, value in {'notebook-extension/tracker': dict(windowingMode='none'), 'apputils-extension/notification': dict(fetchNews='false')}.items():
        f = settings / '@jupyterlab' / f'{name}.jupyterlab-settings'
        f.parent.mkdir(parents=True, exist_ok=True); f.write_text(json.dumps(value))
    with serving([sys.executable, '-m', 'jupyterlab', '--no-browser', '--ServerApp.ip=127.0.0.1', f'--ServerApp.port={port}',
                  f'--IdentityProvider.token={token}', f'--ServerApp.root_dir={tmp}', '--ServerApp.allow_root=True',
                  f'--LabApp.workspaces_dir={tmp / "workspaces"}', f'--LabApp.user_settings_dir={settings}',
                  '--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate', '--LabApp.news_url=None'],
                 port, tmp / 'lab.log', cwd=tmp, env=env, name='JupyterLab', wait_s=90):
        yield f'http://127.0.0.1:{port}/', token, score, tmp / 'lab.log'


def settled_check(page, lam, score, system, tries=10):
    "`check_view` on the inspector page at `lam` once JupyterLab has drawn it (a redraw can detach what was located): retried for a few seconds."
    for i in range(tries):
        try:
            view = visible_view(page, lam=lam)
            view.locator('tr[data-protocol]').first.wait_for(timeout=15_000)
            return check_view(view, score, system=system)
        except Exception:
            if i == tries - 1: raise
            time.sleep(1)


def test_jupyterlab_runs_the_inspector(browser, lab):
    "In JupyterLab, as a user opens it: run every cell of the tutorial from the Run menu, move the λ slider; the winner and values shown equal `state_at`."
    url, token, score, llog = lab
    page, log = open_page(browser, f'{url}lab/tree/{TUTORIAL.name}?token={token}', lambda u: u.startswith(url) or u.startswith(('data:', 'blob:')))
    try: page.locator('.jp-Notebook').first.wait_for(timeout=120_000)
    except Exception: pytest.fail(f'the notebook did not open; JupyterLab log: {llog.read_text()[-3000:]}')
    page.get_by_text('Python 3 (ipykernel) | Idle').first.wait_for(timeout=120_000)  # the kernel is up: Run All would otherwise be lost
    page.locator('.lm-MenuBar-itemLabel', has_text='Run').first.click()
    page.locator('.lm-Menu-itemLabel', has_text='Run All Cells').first.click()
    view = visible_view(page)
    try: view.wait_for(timeout=180_000)
    except Exception:
        ARTIFACTS.mkdir(parents=True, exist_ok=True); page.screenshot(path=str(ARTIFACTS / 'jupyterlab_failed.png'))
        pytest.fail(f'the inspector did not appear (screenshot: jupyterlab_failed.png); console: {log}; JupyterLab log: {llog.read_text()[-3000:]}')
    system = str(score.system.values[0])
    page.locator('.jp-Cell-outputArea', has_text='λ = 0.7 on').first.wait_for(timeout=120_000)  # the cell that sets the slider to 0.7 ran
    lam0, _ = settled_check(page, '0.70', score, system)
    handle = page.locator('.widget-slider .noUi-handle').first
    handle.focus(); handle.press('ArrowRight'); handle.press('ArrowRight')
    lam1 = round(min(lam0 + 0.1, 1.0), 2)
    lam, st = settled_check(page, f'{lam1:.2f}', score, system)
    assert lam == lam1
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try: visible_view(page, lam=f'{lam1:.2f}').scroll_into_view_if_needed(timeout=5_000)
    except Exception: pass  # the screenshot is a record, not a check: JupyterLab may redraw the output meanwhile
    page.screenshot(path=str(ARTIFACTS / 'inspector_jupyterlab.png'))
    errors = [e for e in log['errors'] if not e.startswith('Failed to load resource')]
    assert not errors, errors
    page.close()
