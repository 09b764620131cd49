// gradebox report: builds the page from the JSON in #gradebox-data. Everything from a run
// (answers, evidence, diffs, names) is untrusted: it reaches the page only as text (text
// nodes, textContent, attribute values set one by one), never as markup, and no link or
// source is ever made from it. The Content-Security-Policy forbids the rest.
'use strict';
(() => {
  performance.mark('gradebox-start');
  const DATA = JSON.parse(document.getElementById('gradebox-data').textContent);
  performance.mark('gradebox-parsed'); // the bench reads these marks
  const STATUSES = ['passed', 'failed', 'error'];
  const LABEL = { passed: '✔ PASS', failed: '✘ FAIL', error: '! ERROR' };
  const ORDER = { error: 0, failed: 1, passed: 2 };
  const PAGE = 100; // rows drawn at once: a 10,000-test run draws 100
  const SHOWN = 100000; // characters of one text shown before "show all"
  const SEARCHED = 65536; // characters of each field the search reads
  const DIFF_LINES = 2000; // lines of one file's diff drawn before "show more"
  const SVGNS = 'http://www.w3.org/2000/svg';
  const app = document.getElementById('app');

  // ---------------------------------------------------------------- DOM, text only
  function h(tag, props, ...kids) {
    const e = document.createElement(tag);
    setProps(e, props);
    for (const k of kids.flat(Infinity)) {
      if (k === null || k === undefined || k === false) continue;
      e.append(typeof k === 'string' || typeof k === 'number' ? String(k) : k);
    }
    return e;
  }
  function s(tag, props, ...kids) {
    const e = document.createElementNS(SVGNS, tag);
    setProps(e, props);
    for (const k of kids.flat()) if (k) e.append(typeof k === 'string' ? k : k);
    return e;
  }
  function setProps(e, props) {
    if (!props) return;
    for (const [k, v] of Object.entries(props)) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'class') e.setAttribute('class', v);
      else if (k === 'text') e.textContent = v;
      else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v === true ? '' : String(v)); // names are ours; values text
    }
  }
  // Right-to-left overrides and isolates could reorder what a reader sees: shown as marks.
  const BIDI = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;
  function visible(text) {
    const str = String(text);
    if (!BIDI.test(str)) return str;
    BIDI.lastIndex = 0;
    const out = document.createDocumentFragment();
    let last = 0;
    for (const m of str.matchAll(BIDI)) {
      out.append(str.slice(last, m.index));
      const code = m[0].codePointAt(0).toString(16).toUpperCase().padStart(4, '0');
      out.append(h('span', { class: 'bidi', title: 'a bidirectional control character' }, `⟦U+${code}⟧`));
      last = m.index + m[0].length;
    }
    out.append(str.slice(last));
    return out;
  }
  // The same marks, as a string: where only a string can go (options, SVG, titles).
  const marked = (text) => String(text).replace(BIDI, (c) => `⟦U+${c.codePointAt(0).toString(16).toUpperCase().padStart(4, '0')}⟧`);
  function oneLine(text, n = 160) {
    const str = String(text ?? '');
    const line = str.trim().split('\n').filter((l) => l.trim()).pop() || '';
    return line.length > n ? line.slice(0, n - 1) + '…' : line;
  }
  function textBlock(text) {
    const str = typeof text === 'string' ? text : JSON.stringify(text, null, 2);
    const pre = h('pre', null, visible(str.length > SHOWN ? str.slice(0, SHOWN) : str));
    if (str.length <= SHOWN) return pre;
    const more = h('button', {
      class: 'more', type: 'button',
      onclick: () => { pre.replaceChildren(visible(str)); more.remove(); },
    }, `show all ${str.length.toLocaleString()} characters`);
    return h('div', null, pre, more);
  }
  // "1 test", "2 tests": a count and its noun agreeing.
  const nTests = (n) => `${n} test${n === 1 ? '' : 's'}`;
  const pct = (x) => (x === null || x === undefined || Number.isNaN(x) ? '–' : `${(x * 100).toFixed(1)}%`);
  const num = (x, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : '–');
  function ms(v) {
    if (typeof v !== 'number') return '–';
    if (v < 1000) return `${v} ms`;
    if (v < 60000) return `${(v / 1000).toFixed(1)} s`;
    return `${Math.floor(v / 60000)} min ${Math.round((v % 60000) / 1000)} s`;
  }
  function when(iso) {
    const d = new Date(iso);
    return Number.isNaN(d.getTime()) ? String(iso) : `${d.toISOString().slice(0, 19).replace('T', ' ')} UTC`;
  }
  const badge = (status) => h('span', { class: `badge ${status || 'none'}` }, status ? LABEL[status] : 'not run');

  // ---------------------------------------------------------------- the data
  const runs = DATA.runs;
  runs.forEach((run, i) => run.rows.forEach((row, j) => { row._run = i; row._i = j; }));
  const multi = runs.length > 1;
  let tests = []; // [{id, rows: [row|null per run]}]
  let byId = new Map();
  function index() {
    byId = new Map();
    tests = [];
    runs.forEach((run, i) => {
      for (const row of run.rows) {
        let t = byId.get(row.id);
        if (!t) { t = { id: row.id, rows: runs.map(() => null) }; byId.set(row.id, t); tests.push(t); }
        t.rows[i] = row;
        t.hay = undefined;
      }
    });
    // The tests a run set out to run (its plan) that have no result yet, or never will.
    runs.forEach((run) => {
      for (const id of run.plan || []) {
        if (byId.has(id)) continue;
        const t = { id, rows: runs.map(() => null) };
        byId.set(id, t); tests.push(t);
      }
    });
  }
  index();
  const primary = (t) => t.rows[state.run] || null;
  const duration = (row) => (row ? row.duration : undefined);
  // A test's whole result (evidence, outputs, diff) sits in a data block of its own, parsed
  // when the test is opened or searched: the page parses only the small rows at first.
  function full(row) {
    if (row._full === undefined) {
      const el = document.getElementById(`gbx-${row._run}-${row._i}`);
      row._full = el ? JSON.parse(el.textContent) : row;
    }
    return row._full;
  }
  // The same, not kept: the search reads every test's text once and keeps only that.
  function peek(row) {
    if (row._full !== undefined) return row._full;
    const el = document.getElementById(`gbx-${row._run}-${row._i}`);
    return el ? JSON.parse(el.textContent) : row;
  }
  const graderNames = (row) => (row ? (row.graders || []).map((g) => g.name) : []);
  const targetOf = (row, i) => (row && row.target ? row.target : runs[i].name);
  const flaky = (row) => !!(row && row._trials && row._trials.c > 0 && row._trials.c < row._trials.n);
  const flipped = (t) => {
    const present = t.rows.filter(Boolean);
    return present.length > 1 && present.some((r) => r.status !== present[0].status);
  };
  // What the search reads of one trial of a test run several times: its error, answer and
  // graders' evidence (a failing trial's answer is often what is searched for).
  function trialText(tr, parts) {
    parts.push(tr.error || '', (tr.output || '').slice(0, SEARCHED));
    for (const g of tr.graders || []) parts.push(g.name, (g.evidence || '').slice(0, SEARCHED));
    return parts;
  }
  function haystack(t) {
    if (t.hay !== undefined) return t.hay;
    const parts = [t.id];
    for (const row of t.rows) {
      if (!row) continue;
      const f = peek(row);
      parts.push(f.error || '', (f.output || '').slice(0, SEARCHED));
      for (const g of f.graders || []) parts.push(g.name, (g.evidence || '').slice(0, SEARCHED));
      for (const tr of f.trials || []) trialText(tr, parts);
    }
    t.hay = parts.join('\n');
    t.hayLower = t.hay.toLowerCase();
    return t.hay;
  }

  // ---------------------------------------------------------------- state, in the URL
  const state = {
    status: new Set(STATUSES), grader: '', target: '', node: '', q: '', re: false,
    sort: 'status', desc: false, page: 0, run: runs.length - 1, flaky: false, flips: false,
    open: new Set(),
  };
  function readHash() {
    const p = new URLSearchParams(location.hash.slice(1));
    if (p.has('status')) state.status = new Set(p.get('status').split(',').filter((x) => STATUSES.includes(x)));
    for (const k of ['grader', 'target', 'node', 'q']) if (p.has(k)) state[k] = p.get(k);
    state.re = p.get('re') === '1';
    state.flaky = p.get('flaky') === '1';
    state.flips = p.get('flips') === '1';
    if (['status', 'id', 'score', 'duration'].includes(p.get('sort'))) state.sort = p.get('sort');
    state.desc = p.get('desc') === '1';
    state.page = Math.max(0, parseInt(p.get('page') || '0', 10) || 0);
    const run = parseInt(p.get('run') || '', 10);
    if (run >= 0 && run < runs.length) state.run = run;
    state.open = new Set(p.getAll('open'));
  }
  function writeHash() {
    const p = new URLSearchParams();
    if (state.status.size !== STATUSES.length) p.set('status', [...state.status].join(','));
    for (const k of ['grader', 'target', 'node', 'q']) if (state[k]) p.set(k, state[k]);
    if (state.re) p.set('re', '1');
    if (state.flaky) p.set('flaky', '1');
    if (state.flips) p.set('flips', '1');
    if (state.sort !== 'status') p.set('sort', state.sort);
    if (state.desc) p.set('desc', '1');
    if (state.page) p.set('page', String(state.page));
    if (state.run !== runs.length - 1) p.set('run', String(state.run));
    for (const id of state.open) p.append('open', id);
    const hash = p.toString();
    history.replaceState(null, '', hash ? `#${hash}` : location.pathname + location.search);
  }

  // ---------------------------------------------------------------- header
  // Every figure of a run in one pass over its rows (10,000 rows: one loop, not eight),
  // kept until the rows change (the live view clears it).
  let statsCache = new Map();
  function counts(run) {
    let c = statsCache.get(run);
    if (c) return c;
    c = { passed: 0, failed: 0, error: 0, score: 0, scores: [], durs: [], backends: new Set(), images: new Map(), graders: new Map() };
    for (const row of run.rows) {
      c[row.status] += 1;
      c.score += row.score || 0;
      c.scores.push(row.score || 0);
      const d = duration(row);
      if (typeof d === 'number') c.durs.push(d);
      if (row.images) for (const ref in row.images) c.images.set(ref, row.images[ref]);
      for (const g of row.graders || []) {
        if (g.backend) c.backends.add(g.backend);
        let p = c.graders.get(g.name);
        if (!p) { p = { n: 0, passed: 0, error: 0 }; c.graders.set(g.name, p); }
        p.n += 1; if (g.status === 'passed') p.passed += 1; else if (g.status === 'error') p.error += 1;
      }
    }
    c.done = run.rows.length;
    if (run.plan) {
      const have = new Set(run.rows.map((r) => r.id));
      c.planned = run.plan.length;
      c.notRun = run.plan.filter((id) => !have.has(id)).length;
    } else {
      c.planned = run.summary ? run.summary.total : c.done;
      c.notRun = run.summary ? Math.max(0, run.summary.total - c.done) : 0;
    }
    statsCache.set(run, c);
    return c;
  }
  const backends = (run) => [...counts(run).backends].sort();
  const images = (run) => [...counts(run).images].sort();
  function header() {
    const run = runs[runs.length - 1];
    const sum = run.summary || {};
    const c = counts(run);
    const title = DATA.title || sum.suite || run.name; // runs of several suites: each named
    document.title = `gradebox: ${marked(title)}`;
    const live = DATA.live ? liveBadge(run) : null;
    const mean = c.done ? c.score / c.done : NaN; // no results: no mean ("–"), not 0.000
    const gate = sum.min_mean_score;
    const meta = h('dl', { class: 'meta' });
    const add = (k, v) => { if (v !== undefined && v !== null && v !== '') meta.append(h('dt', null, k), h('dd', null, visible(String(v)))); };
    add('run', `${run.name}${sum.run_id ? ` (id ${sum.run_id})` : ''}`);
    const started = sum.started_at || (run.rows[0] && run.rows[0].started_at);
    if (started) add('started', when(started));
    const st = DATA.live ? DATA.live.state.state : null;
    add('took', sum.duration_s !== undefined && st !== 'running' ? ms(Math.round(sum.duration_s * 1000))
      : st === 'running' ? 'still running' : st === 'waiting' ? 'not started yet'
        : st === 'stale' ? 'unknown: the run stopped without writing its summary' : 'unknown (no summary.json)');
    add('backend', backends(run).join(', '));
    const imgs = images(run);
    if (imgs.length) add('images', imgs.map(([ref, id]) => `${ref} (${String(id).replace('sha256:', '').slice(0, 12)})`).join(', '));
    add('workers', sum.workers);
    add('threshold', gate !== undefined && gate !== null ? `mean score ≥ ${gate}` : 'none (the suite sets no gate on the mean score)');
    add('gradebox', `${sum.gradebox_version ? `${sum.gradebox_version} ran it; ` : ''}${DATA.version} made this report`);
    if (sum.interrupted) add('interrupted', 'yes: the run was stopped before every test finished');
    if (sum.warnings && sum.warnings.length) add('warnings', sum.warnings.join('; '));
    const cards = h('div', { class: 'cards', role: 'list', 'aria-label': 'counts by status' },
      STATUSES.map((st) => h('div', { class: `card ${st}`, role: 'listitem' }, h('span', { class: 'n' }, c[st]), h('span', { class: 'l' }, LABEL[st]))),
      c.notRun ? h('div', { class: 'card', role: 'listitem' }, h('span', { class: 'n' }, c.notRun), h('span', { class: 'l' }, 'not run')) : null,
      h('div', { class: 'card', role: 'listitem' }, h('span', { class: 'n' }, pct(c.done ? c.passed / c.done : NaN)), h('span', { class: 'l' }, 'pass rate')),
      h('div', { class: 'card', role: 'listitem' }, h('span', { class: 'n' }, num(mean, 3)), h('span', { class: 'l' }, 'mean score')),
      gate !== undefined && gate !== null
        ? h('div', { class: 'card', role: 'listitem' }, h('span', { class: `n ${mean < gate - 1e-9 ? 'gate-bad' : ''}` }, String(gate)),
          h('span', { class: 'l' }, mean < gate - 1e-9 ? 'threshold: mean score below it' : c.done ? 'threshold: met' : 'threshold'))
        : null);
    return h('header', null,
      h('div', { class: 'topline' }, h('h1', null, visible(title)), live),
      unrelatedNotes(),
      h('p', { class: 'warning', role: 'note' }, DATA.warning),
      cards, meta,
      multi ? runsTable() : null,
      targetsTable(run));
  }
  // Runs that share few tests or ran different suites (report/compare.py's rule): said at
  // the top, before any figure compares them.
  function unrelatedNotes() {
    return (DATA.comparisons || []).filter((c) => c.unrelated).map((c) => h('p', { class: 'warning unrelated', role: 'alert' },
      h('strong', null, 'These runs may not be comparable. '), visible(c.unrelated)));
  }
  // A target matrix (every test once per target): each target's pass rate, from its rows.
  function targetsTable(run) {
    const per = new Map();
    for (const row of run.rows) {
      if (!row.target) continue;
      let p = per.get(row.target);
      if (!p) { p = { n: 0, passed: 0, failed: 0, error: 0, score: 0 }; per.set(row.target, p); }
      p.n += 1; p[row.status] += 1; p.score += row.score || 0;
    }
    if (per.size < 2) return null;
    const t = h('table', { class: 'cmp' }, h('thead', null, h('tr', null,
      ['target', 'passed', 'failed', 'error', 'pass rate', 'mean score'].map((x) => h('th', null, x)))));
    const body = h('tbody');
    for (const [name, p] of [...per].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0))) {
      body.append(h('tr', null, h('td', null, visible(name)),
        h('td', { class: 'num st-passed' }, p.passed), h('td', { class: 'num st-failed' }, p.failed), h('td', { class: 'num st-error' }, p.error),
        h('td', { class: 'num' }, pct(p.passed / p.n)), h('td', { class: 'num' }, num(p.score / p.n, 3))));
    }
    t.append(body);
    return h('div', { class: 'targets' }, h('h2', null, 'Per target'), t);
  }
  function runsTable() {
    const t = h('table', { class: 'cmp' }, h('thead', null, h('tr', null,
      ['#', 'run', 'suite', 'started', 'passed', 'failed', 'error', 'pass rate', 'mean score'].map((x) => h('th', null, x)))));
    const body = h('tbody');
    runs.forEach((run, i) => {
      const c = counts(run);
      const sum = run.summary || {};
      body.append(h('tr', null, h('td', null, i === 0 ? `${i + 1} (baseline)` : String(i + 1)), h('td', null, visible(run.name)),
        h('td', null, visible(sum.suite || '')), h('td', null, sum.started_at ? when(sum.started_at) : ''),
        h('td', { class: 'num st-passed' }, c.passed), h('td', { class: 'num st-failed' }, c.failed), h('td', { class: 'num st-error' }, c.error),
        h('td', { class: 'num' }, pct(c.done ? c.passed / c.done : NaN)), h('td', { class: 'num' }, num(c.done ? c.score / c.done : NaN, 3))));
    });
    t.append(body);
    return h('div', null, h('h2', null, 'Runs'), t);
  }

  // ---------------------------------------------------------------- charts (inline SVG)
  function histogram(title, values, bins, labels, cls) {
    const W = 320, H = 150, top = 10, bottom = 28, left = 30;
    const counts = new Array(bins.length).fill(0);
    for (const v of values) {
      let i = bins.findIndex((b) => v < b);
      if (i < 0) i = bins.length - 1;
      counts[i] += 1;
    }
    const max = Math.max(1, ...counts);
    const bw = (W - left) / bins.length;
    const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': `${title}: ${counts.map((c, i) => `${labels[i]}: ${c}`).join(', ')}` });
    svg.append(s('line', { class: 'axis', x1: left, y1: H - bottom, x2: W, y2: H - bottom }));
    svg.append(s('text', { x: 0, y: top + 8 }, String(max)));
    svg.append(s('text', { x: 0, y: H - bottom }, '0'));
    counts.forEach((c, i) => {
      const hgt = ((H - top - bottom) * c) / max;
      const rect = s('rect', { class: typeof cls === 'function' ? cls(i) : cls, x: left + i * bw + 2, y: H - bottom - hgt, width: Math.max(1, bw - 4), height: hgt });
      rect.append(s('title', null, `${labels[i]}: ${c}`));
      svg.append(rect);
      if (bins.length <= 12) svg.append(s('text', { x: left + i * bw + 2, y: H - bottom + 14 }, labels[i]));
    });
    return h('figure', null, h('figcaption', null, title), svg);
  }
  function graderBars(run) {
    const per = counts(run).graders;
    const rows = [...per].sort((a, b) => a[1].passed / a[1].n - b[1].passed / b[1].n || a[0].localeCompare(b[0])).slice(0, 25);
    const W = 320, line = 18, labelW = 130, H = Math.max(30, rows.length * line + 8);
    const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': `pass rate per grader: ${rows.map(([n, p]) => `${marked(n)} ${pct(p.passed / p.n)}`).join(', ')}` });
    rows.forEach(([name, p], i) => {
      const y = 4 + i * line;
      const frac = p.passed / p.n;
      const label = name.length > 22 ? name.slice(0, 21) + '…' : name;
      svg.append(s('text', { x: 0, y: y + 12 }, marked(label)));
      svg.append(s('rect', { class: 'track', x: labelW, y: y + 2, width: W - labelW - 44, height: 12 }));
      const bar = s('rect', { class: 'bar-passed', x: labelW, y: y + 2, width: (W - labelW - 44) * frac, height: 12 });
      bar.append(s('title', null, `${marked(name)}: ${p.passed}/${p.n} passed, ${p.error} errors`));
      svg.append(bar);
      svg.append(s('text', { x: W - 40, y: y + 12 }, pct(frac)));
    });
    if (!rows.length) svg.append(s('text', { x: 0, y: 20 }, 'no graders'));
    return h('figure', null, h('figcaption', null, per.size > rows.length ? `Pass rate per grader (lowest ${rows.length} of ${per.size})` : 'Pass rate per grader'), svg);
  }
  function charts() {
    const run = runs[runs.length - 1];
    const c = counts(run);
    if (!c.done) return h('section', { 'aria-labelledby': 'h-charts' }, h('h2', { id: 'h-charts' }, 'At a glance'),
      h('p', { class: 'muted' }, 'No results yet: the charts are drawn from the first.'));
    const statusBins = [1, 2, 3];
    const statusVals = [...Array(c.passed).fill(0), ...Array(c.failed).fill(1), ...Array(c.error).fill(2)];
    const durs = c.durs;
    const dBins = [100, 300, 1000, 3000, 10000, 30000, 60000, Infinity];
    const dLabels = ['<0.1s', '<0.3s', '<1s', '<3s', '<10s', '<30s', '<1m', '≥1m'];
    const sBins = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, Infinity];
    const sLabels = ['0', '.1', '.2', '.3', '.4', '.5', '.6', '.7', '.8', '.9+'];
    return h('section', { 'aria-labelledby': 'h-charts' }, h('h2', { id: 'h-charts' }, 'At a glance'),
      h('div', { class: 'charts' },
        histogram(`Status (${nTests(c.done)})`, statusVals, statusBins, ['passed', 'failed', 'error'], (i) => `bar-${STATUSES[i]}`),
        histogram('Scores', c.scores, sBins, sLabels, 'bar'),
        graderBars(run),
        histogram(`Durations (${nTests(durs.length)})`, durs, dBins, dLabels, 'bar')));
  }

  // ---------------------------------------------------------------- trials
  function trialsSection() {
    const run = runs[state.run];
    const withTrials = run.rows.filter((r) => r._trials);
    if (!withTrials.length) return null;
    const K = Math.min(DATA.max_k, Math.max(...withTrials.map((r) => r._trials.n)));
    const head = h('tr', null, h('th', null, 'k'), h('th', { class: 'num' }, 'pass@k'), h('th', { class: 'num' }, 'pass^k'), h('th', { class: 'num' }, 'tests with ≥ k trials'));
    const body = h('tbody');
    for (let k = 1; k <= K; k++) {
      const have = withTrials.filter((r) => r._trials.at.length >= k);
      const mean = (key) => have.reduce((a, r) => a + r._trials[key][k - 1], 0) / have.length;
      body.append(h('tr', null, h('td', null, k), h('td', { class: 'num' }, pct(mean('at'))), h('td', { class: 'num' }, pct(mean('hat'))), h('td', { class: 'num' }, have.length)));
    }
    const nFlaky = withTrials.filter(flaky).length;
    return h('section', { 'aria-labelledby': 'h-trials' }, h('h2', { id: 'h-trials' }, 'Trials'),
      h('p', null, `${nTests(withTrials.length)} ran more than once; `, h('strong', null, `${nFlaky} flaky`),
        ' (passed in some trials, not in others). ',
        nFlaky ? h('button', { type: 'button', onclick: () => { state.flaky = true; state.page = 0; syncControls(); refreshTable(); document.getElementById('h-tests').scrollIntoView(); } }, 'show the flaky tests') : null),
      h('table', { class: 'cmp' }, h('thead', null, head), body));
  }
  function marks(row) {
    const tr = row && row._trials;
    if (!tr) return null;
    const trials = row.trials || [];
    const shown = trials.slice(0, 20).map((t, i) => h('span', { class: `st-${t.status}`, title: `trial ${i + 1}: ${t.status}, score ${num(t.score)}` },
      t.status === 'passed' ? '✔' : t.status === 'failed' ? '✘' : '!'));
    return h('span', null, h('span', { class: 'marks', 'aria-label': `${tr.c} of ${tr.n} trials passed` }, shown, trials.length > 20 ? '…' : ''),
      ` ${tr.c}/${tr.n}`, flaky(row) ? h('span', { class: 'badge flaky' }, 'flaky') : null);
  }

  // ---------------------------------------------------------------- comparison
  function openTest(id) {
    state.q = id; state.re = false; state.page = 0; state.open.add(id);
    syncControls(); refreshTable();
    document.getElementById('h-tests').scrollIntoView();
  }
  function flipList(label, ids) {
    if (!ids.length) return null;
    return h('div', null, h('h4', null, `${label} (${ids.length})`),
      h('div', { class: 'flips' }, ids.slice(0, 300).map((id) => h('button', { type: 'button', title: marked(id), onclick: () => openTest(id) }, visible(id))),
        ids.length > 300 ? h('span', { class: 'muted' }, `… ${ids.length - 300} more (filter "flipped")`) : null));
  }
  function comparisons() {
    if (!DATA.comparisons.length) return null;
    const sec = h('section', { 'aria-labelledby': 'h-cmp' }, h('h2', { id: 'h-cmp' }, 'Comparison with the baseline'));
    for (const c of DATA.comparisons) {
      const a = runs[c.a].name, b = runs[c.b].name;
      sec.append(h('h3', null, visible(`${a} → ${b}`)));
      if (c.error) { sec.append(h('p', null, visible(c.error))); continue; }
      const level = Math.round(c.confidence * 100);
      sec.append(h('p', null, c.significantly_worse
        ? h('strong', { class: 'st-failed' }, `significantly worse: McNemar p = ${c.p_value.toFixed(4)} < 0.05`)
        : `no significant regression (McNemar p = ${c.p_value.toFixed(4)})`,
        `; ${nTests(c.tests)} in both, ${c.regressions.length} pass → fail, ${c.fixes.length} fail → pass`,
        c.only_in_a.length || c.only_in_b.length ? `; only in ${a}: ${c.only_in_a.length}, only in ${b}: ${c.only_in_b.length}` : ''));
      const t = h('table', { class: 'cmp' }, h('thead', null, h('tr', null, ['', 'baseline', 'this run', 'Δ', `${level}% bootstrap CI of Δ`].map((x) => h('th', null, x)))),
        h('tbody', null,
          h('tr', null, h('td', null, 'pass rate'), h('td', null, pct(c.pass_rate_a)), h('td', null, pct(c.pass_rate_b)),
            h('td', null, `${(c.pass_rate_delta * 100).toFixed(1)} pp`), h('td', null, `[${(c.pass_rate_ci[0] * 100).toFixed(1)}, ${(c.pass_rate_ci[1] * 100).toFixed(1)}] pp`)),
          h('tr', null, h('td', null, 'mean score'), h('td', null, num(c.mean_score_a, 3)), h('td', null, num(c.mean_score_b, 3)),
            h('td', null, num(c.mean_score_delta, 3)), h('td', null, `[${num(c.mean_score_ci[0], 3)}, ${num(c.mean_score_ci[1], 3)}]`))));
      sec.append(t, h('p', { class: 'muted' }, `bootstrap: ${c.resamples} resamples, seed ${c.seed}`));
      sec.append(...[flipList('pass → fail', c.regressions), flipList('fail → pass', c.fixes)].filter(Boolean));
      if (c.graders.length) {
        const flips = new Map(c.grader_flips.map((f) => [f.name, f]));
        sec.append(h('h4', null, 'per grader'), h('table', { class: 'cmp' },
          h('thead', null, h('tr', null, ['grader', 'tests', 'baseline', 'this run', 'Δ', 'pass → fail', 'fail → pass'].map((x) => h('th', null, x)))),
          h('tbody', null, c.graders.map((g) => h('tr', null, h('td', null, visible(g.name)), h('td', { class: 'num' }, g.tests), h('td', { class: 'num' }, pct(g.pass_rate_a)),
            h('td', { class: 'num' }, pct(g.pass_rate_b)), h('td', { class: 'num' }, `${(g.delta * 100).toFixed(1)} pp`),
            h('td', { class: 'num' }, (flips.get(g.name) || {}).regressions || 0), h('td', { class: 'num' }, (flips.get(g.name) || {}).fixes || 0))))));
      }
    }
    return sec;
  }

  // ---------------------------------------------------------------- filters and table
  const controls = {};
  function options(select, values, all) {
    const want = ['', ...values];
    const have = [...select.options].map((o) => o.value);
    if (want.length === have.length && want.every((v, i) => v === have[i])) return;
    select.replaceChildren(...want.map((v) => h('option', { value: v }, v === '' ? all : marked(v))));
    select.value = want.includes(state[select.name]) ? state[select.name] : '';
  }
  function filterBar() {
    const bar = h('div', { class: 'filters', role: 'search' });
    controls.status = {};
    for (const st of STATUSES) {
      const box = h('input', { type: 'checkbox', id: `f-${st}`, onchange: (e) => { if (e.target.checked) state.status.add(st); else state.status.delete(st); state.page = 0; refreshTable(); } });
      controls.status[st] = box;
      bar.append(h('label', { for: `f-${st}` }, box, ' ', h('span', { class: `st-${st}` }, LABEL[st]), ' ', h('span', { class: 'muted', id: `n-${st}` })));
    }
    for (const [name, all] of [['grader', 'every grader'], ['target', 'every target'], ['node', 'every node']]) {
      const sel = h('select', { name, 'aria-label': name, onchange: (e) => { state[name] = e.target.value; state.page = 0; refreshTable(); } });
      controls[name] = sel;
      bar.append(h('label', { id: `l-${name}` }, `${name} `, sel));
      sel.dataset.all = all;
    }
    const q = h('input', { type: 'search', id: 'q', placeholder: 'search ids, answers, evidence', 'aria-label': 'search',
      oninput: (e) => { state.q = e.target.value; state.page = 0; refreshTable(); } });
    const re = h('input', { type: 'checkbox', id: 'f-re', onchange: (e) => { state.re = e.target.checked; state.page = 0; refreshTable(); } });
    controls.q = q; controls.re = re;
    bar.append(q, h('label', { for: 'f-re' }, re, ' regex'));
    const fl = h('input', { type: 'checkbox', id: 'f-flaky', onchange: (e) => { state.flaky = e.target.checked; state.page = 0; refreshTable(); } });
    controls.flaky = fl;
    bar.append(h('label', { for: 'f-flaky', id: 'l-flaky' }, fl, ' flaky only'));
    if (multi) {
      const fp = h('input', { type: 'checkbox', id: 'f-flips', onchange: (e) => { state.flips = e.target.checked; state.page = 0; refreshTable(); } });
      controls.flips = fp;
      bar.append(h('label', { for: 'f-flips' }, fp, ' flipped only'));
      const rs = h('select', { 'aria-label': 'verdicts of run', onchange: (e) => { state.run = parseInt(e.target.value, 10); state.page = 0; refreshTable(); } },
        runs.map((r, i) => h('option', { value: i }, `${i + 1}: ${marked(r.name)}`)));
      controls.run = rs;
      bar.append(h('label', null, 'filter by run ', rs));
    }
    bar.append(h('span', { class: 'count', id: 'count', 'aria-live': 'polite' }));
    return bar;
  }
  function syncControls() {
    for (const st of STATUSES) controls.status[st].checked = state.status.has(st);
    controls.q.value = state.q;
    controls.re.checked = state.re;
    controls.flaky.checked = state.flaky;
    if (controls.flips) controls.flips.checked = state.flips;
    if (controls.run) controls.run.value = String(state.run);
  }
  function refreshOptions() {
    const graders = new Set(), targets = new Set(), nodes = new Set();
    let trials = false;
    runs.forEach((run, i) => {
      for (const row of run.rows) {
        for (const g of graderNames(row)) graders.add(g);
        targets.add(targetOf(row, i));
        if (row.node) nodes.add(row.node);
        if (row._trials) trials = true;
      }
    });
    options(controls.grader, [...graders].sort(), 'every grader');
    options(controls.target, [...targets].sort(), 'every target');
    options(controls.node, [...nodes].sort(), 'every node');
    document.getElementById('l-target').hidden = targets.size < 2;
    document.getElementById('l-node').hidden = nodes.size === 0;
    document.getElementById('l-flaky').hidden = !trials;
  }
  // A regular expression runs in a worker of its own, never on the page: one that backtracks
  // for ever (`(.+)+X`, typed, or in a link someone sent: the search is in the URL) would
  // freeze the page, and JavaScript cannot stop a match once it runs. The worker gets every
  // test's text once (again when the tests change) and a pattern per search; one that has
  // not answered within REGEX_MS is ended, and the search is reported as too slow.
  const REGEX_MS = 2000;
  const WORKER = "'use strict'; let hays = [];"
    + "onmessage = (e) => { if (e.data.hays) { hays = e.data.hays; return; }"
    + " const re = new RegExp(e.data.q, 'i'); const hits = [];"
    + " for (let i = 0; i < hays.length; i++) if (re.test(hays[i])) hits.push(i);"
    + " postMessage({ q: e.data.q, hits }); };";
  const rx = { worker: null, tests: null, asked: null, timer: 0, done: null, note: '' };
  function regexHits(q) {
    if (rx.done && rx.done.q === q && rx.done.tests === tests) return rx.done;
    if (rx.asked === q && rx.tests === tests) return null; // on its way
    if (rx.worker && (rx.asked !== null || rx.tests !== tests)) { rx.worker.terminate(); rx.worker = null; }
    clearTimeout(rx.timer);
    const finish = (done) => { clearTimeout(rx.timer); rx.asked = null; rx.done = done; refreshTable(); };
    if (!rx.worker) {
      try {
        rx.worker = new Worker(URL.createObjectURL(new Blob([WORKER], { type: 'text/javascript' })));
      } catch (e) { // no worker here: no regex search (never one on the page)
        return { q, tests, hits: new Set(), failed: 'regex search needs Web Workers, which this browser refused' };
      }
      const mine = rx.worker, its = tests;
      mine.onmessage = (e) => { if (rx.worker === mine && e.data.q === rx.asked) finish({ q: e.data.q, tests: its, hits: new Set(e.data.hits.map((i) => its[i].id)) }); };
      mine.onerror = (e) => { e.preventDefault(); if (rx.worker === mine) { rx.worker.terminate(); rx.worker = null; finish({ q: rx.asked, tests: its, hits: new Set(), failed: 'the regex search failed' }); } };
      mine.postMessage({ hays: tests.map(haystack) });
      rx.tests = tests;
    }
    rx.asked = q;
    rx.worker.postMessage({ q });
    rx.timer = setTimeout(() => {
      if (rx.worker) rx.worker.terminate();
      rx.worker = null;
      finish({ q, tests, hits: new Set(), failed: `regex stopped after ${REGEX_MS / 1000} s: it takes too long on this run's text` });
    }, REGEX_MS);
    return null;
  }
  function badRegex(why) {
    controls.q.classList.add('re-bad'); controls.q.setAttribute('aria-invalid', 'true');
    rx.note = why;
    return () => false;
  }
  function matcher() {
    rx.note = '';
    if (!state.q) return () => true;
    if (state.re) {
      try { new RegExp(state.q, 'i'); } catch (e) { return badRegex('not a regular expression'); }
      const done = regexHits(state.q);
      if (done && done.failed) return badRegex(done.failed);
      controls.q.classList.remove('re-bad'); controls.q.removeAttribute('aria-invalid');
      // While a search is on its way, the last answer to the same pattern stands (the live
      // view's rows change every second: the table does not empty meanwhile).
      const shown = done || (rx.done && rx.done.q === state.q && !rx.done.failed ? rx.done : null);
      if (!done) rx.note = 'searching…';
      return shown ? (t) => shown.hits.has(t.id) : () => false;
    }
    controls.q.classList.remove('re-bad');
    const q = state.q.toLowerCase();
    return (t) => { haystack(t); return t.hayLower.includes(q); };
  }
  function filtered() {
    const match = matcher();
    const out = [];
    for (const t of tests) {
      const row = primary(t);
      const status = row ? row.status : null;
      if (row && !state.status.has(status)) continue;
      if (!row && state.status.size !== STATUSES.length) continue;
      if (state.grader && !graderNames(row).includes(state.grader)) continue;
      if (state.target && (!row || targetOf(row, state.run) !== state.target)) continue;
      if (state.node && (!row || row.node !== state.node)) continue;
      if (state.flaky && !flaky(row)) continue;
      if (state.flips && !flipped(t)) continue;
      if (!match(t)) continue;
      out.push(t);
    }
    const key = {
      status: (t) => { const r = primary(t); return r ? ORDER[r.status] : 3; },
      id: () => 0,
      score: (t) => { const r = primary(t); return r ? r.score : -1; },
      duration: (t) => duration(primary(t)) ?? -1,
    }[state.sort];
    const dir = state.desc ? -1 : 1;
    out.sort((a, b) => dir * (key(a) - key(b) || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)));
    return out;
  }
  const COLS = () => [
    ['id', 'test', ''],
    ['status', multi ? 'verdicts' : 'verdict', ''],
    ['score', 'score', 'num'],
    [null, 'graders', ''],
    ['duration', 'duration', 'num'],
    [null, 'why not passed', ''],
  ];
  function tableHead() {
    const tr = h('tr');
    for (const [key, label, cls] of COLS()) {
      const th = h('th', { class: cls, scope: 'col' });
      if (key) {
        th.setAttribute('aria-sort', state.sort === key ? (state.desc ? 'descending' : 'ascending') : 'none');
        th.append(h('button', { type: 'button', onclick: () => {
          if (state.sort === key) state.desc = !state.desc; else { state.sort = key; state.desc = key === 'score' || key === 'duration'; }
          refreshTable();
        } }, label));
      } else th.append(label);
      tr.append(th);
    }
    return tr;
  }
  const details = new Map(); // id -> {row, el}: built when opened, kept while unchanged
  function detailFor(t) {
    const row = primary(t) || t.rows.find(Boolean);
    const cached = details.get(t.id);
    if (cached && cached.rows.every((r, i) => r === t.rows[i])) return cached.el;
    const el = detail(t, row);
    details.set(t.id, { rows: [...t.rows], el });
    return el;
  }
  function why(row) {
    if (!row || row.status === 'passed') return '';
    return row.why || '';
  }
  // A verdict among several runs' in the table: which run's it is, on hover.
  function tableBadge(status, i) {
    const b = badge(status);
    b.title = `${runLabel(i)}: ${status || 'not run'}`;
    return b;
  }
  function rowEls(t) {
    const row = primary(t);
    const open = state.open.has(t.id);
    const toggle = h('button', { type: 'button', class: 'toggle', 'aria-expanded': open ? 'true' : 'false', title: marked(t.id.slice(0, 2000)),
      onclick: () => { if (state.open.has(t.id)) state.open.delete(t.id); else state.open.add(t.id); refreshTable(); } }, visible(t.id.length > 500 ? `${t.id.slice(0, 499)}…` : t.id));
    const gs = row ? row.graders || [] : [];
    const tr = h('tr', { class: open ? 'open' : null, 'data-id': t.id },
      h('td', { class: 'idcell' }, toggle),
      h('td', null, multi ? t.rows.map((r, i) => [tableBadge(r && r.status, i), ' ']) : badge(row && row.status), marks(row)),
      h('td', { class: 'num' }, row ? num(row.score) : '–'),
      h('td', null, row ? `${gs.filter((g) => g.passed).length}/${gs.length} passed` : '–'),
      h('td', { class: 'num' }, ms(duration(row))),
      h('td', { class: 'why', title: marked(why(row)) }, visible(why(row))));
    if (!open) return [tr];
    return [tr, h('tr', { class: 'detailrow' }, h('td', { class: 'detail', colspan: COLS().length }, detailFor(t)))];
  }
  // What an empty table means, said in it: no results yet, a search still on its way, or
  // filters that leave nothing (with the way back to every test).
  function emptyRow() {
    const all = () => {
      Object.assign(state, { status: new Set(STATUSES), grader: '', target: '', node: '', q: '', re: false, flaky: false, flips: false, page: 0 });
      syncControls(); refreshTable();
    };
    const said = !tests.length ? 'No results yet.'
      : rx.note === 'searching…' ? 'Searching…'
        : [`No test matches these filters (${nTests(tests.length)} in all). `, h('button', { type: 'button', class: 'clear', onclick: all }, 'show every test')];
    return h('tr', { class: 'empty' }, h('td', { colspan: COLS().length }, said));
  }
  let table, tbody, thead, pager;
  function refreshTable() {
    writeHash();
    // The toggle that had the focus gets it back once its row is drawn again (keyboard use).
    const focused = document.activeElement && document.activeElement.classList.contains('toggle')
      ? document.activeElement.closest('tr').dataset.id : null;
    const list = filtered();
    const pages = Math.max(1, Math.ceil(list.length / PAGE));
    if (state.page >= pages) state.page = pages - 1;
    const slice = list.slice(state.page * PAGE, (state.page + 1) * PAGE);
    thead.replaceChildren(tableHead());
    const frag = document.createDocumentFragment();
    for (const t of slice) frag.append(...rowEls(t));
    if (!slice.length) frag.append(emptyRow());
    tbody.replaceChildren(frag);
    if (focused !== null) {
      const again = [...tbody.querySelectorAll('tr[data-id]')].find((tr) => tr.dataset.id === focused);
      if (again) again.querySelector('button.toggle').focus();
    }
    for (const st of STATUSES) {
      const n = tests.filter((t) => { const r = primary(t); return r && r.status === st; }).length;
      document.getElementById(`n-${st}`).textContent = `(${n})`;
    }
    document.getElementById('count').textContent = `${list.length} of ${nTests(tests.length)}${rx.note ? ` (${rx.note})` : ''}`;
    pager.replaceChildren(
      h('button', { type: 'button', disabled: state.page === 0, onclick: () => { state.page -= 1; refreshTable(); } }, '‹ previous'),
      h('span', null, `page ${state.page + 1} of ${pages}`),
      h('button', { type: 'button', disabled: state.page >= pages - 1, onclick: () => { state.page += 1; refreshTable(); } }, 'next ›'));
  }

  // ---------------------------------------------------------------- one test opened
  function kv(pairs) {
    const dl = h('dl', { class: 'kv' });
    for (const [k, v] of pairs) if (v !== undefined && v !== null && v !== '' && v !== false) dl.append(h('dt', null, k), h('dd', null, typeof v === 'object' && v.nodeType ? v : visible(String(v))));
    return dl;
  }
  function messages(label, list) {
    if (!list || !list.length) return null;
    return [h('h4', null, label), list.map((m) => h('div', null, h('span', { class: 'muted' }, m.role || ''), textBlock(m.content ?? '')))];
  }
  // A negative exit code is the signal that ended the process; 129..159 is a shell's 128 + N.
  function signal(code) {
    if (typeof code !== 'number') return null;
    if (code < 0) return `killed by signal ${-code}`;
    if (code > 128 && code < 160) return `exit ${code}: signal ${code - 128}?`;
    return null;
  }
  // A script's text output is its evidence, its one check's text and its stdout's tail at
  // once (pytest's report three times): a check that says the evidence again, or a tail the
  // evidence ends with, is not shown again.
  function echoes(g, text) {
    return typeof text === 'string' && typeof g.evidence === 'string' && g.evidence.trim().endsWith(text.replace(/^…/, '').trim());
  }
  function grader(g) {
    const checks = (g.checks || []).length === 1 && !g.checks[0].evidence && String(g.checks[0].text).trim() === String(g.evidence || '').trim() ? [] : g.checks;
    const flags = [g.timed_out && 'timed out', g.oom_killed && 'killed: out of memory', signal(g.exit_code), g.output_truncated && 'output truncated', g.negated && 'negated'].filter(Boolean);
    return h('div', { class: 'grader' },
      h('div', { class: 'head' }, badge(g.status), h('span', { class: 'name' }, visible(g.name)), h('span', { class: 'muted' }, g.type || 'program'),
        h('span', null, `score ${num(g.score)}`), g.weight !== undefined ? h('span', { class: 'muted' }, `weight ${g.weight}`) : null,
        g.required !== undefined ? h('span', { class: 'muted' }, `gate ${g.required}`) : null, h('span', { class: 'muted' }, ms(g.duration_ms || 0))),
      kv([['exit code', g.exit_code], ['ended', flags.join(', ')], ['backend', g.backend], ['image', g.image ? `${g.image.ref} (${g.image.id})` : ''],
        ['privileges', (g.privileges || []).join(', ')], ['warnings', (g.warnings || []).join('; ')],
        ['model calls', g.usage ? `${g.usage.calls || 0} (${g.usage.input_tokens || 0} in, ${g.usage.output_tokens || 0} out tokens)` : '']]),
      g.evidence ? [h('h4', null, 'evidence'), textBlock(g.evidence)] : null,
      checks && checks.length ? [h('h4', null, 'checks'), h('ul', { class: 'checks' }, checks.map((c) => h('li', null,
        h('span', { class: c.passed ? 'st-passed' : 'st-failed' }, c.passed ? '✔ pass' : '✘ fail'), ' ', visible(c.text),
        c.score !== undefined && c.score !== null ? h('span', { class: 'muted' }, ` (${num(c.score)})`) : null,
        c.evidence ? textBlock(c.evidence) : null)))] : null,
      g.raw_response ? [h('h4', null, 'unparsed model answer'), textBlock(g.raw_response)] : null,
      g.details ? [h('h4', null, 'details'), textBlock(g.details)] : null,
      g.stdout_tail && !echoes(g, g.stdout_tail) ? [h('h4', null, 'stdout (tail)'), textBlock(g.stdout_tail)] : null,
      g.stderr_tail ? [h('h4', null, 'stderr (tail)'), textBlock(g.stderr_tail)] : null,
      (g.children || []).map(grader));
  }
  // Control characters in a name (a newline, a tab) are shown as marks, like the overrides.
  const CONTROL = /[\u0000-\u001f\u007f-\u009f]/g;
  function visibleName(text) {
    const str = String(text);
    if (!CONTROL.test(str)) return visible(str);
    CONTROL.lastIndex = 0;
    const out = document.createDocumentFragment();
    let last = 0;
    for (const m of str.matchAll(CONTROL)) {
      out.append(visible(str.slice(last, m.index)));
      const code = m[0].codePointAt(0).toString(16).toUpperCase().padStart(4, '0');
      out.append(h('span', { class: 'bidi', title: 'a control character' }, `⟦U+${code}⟧`));
      last = m.index + 1;
    }
    out.append(visible(str.slice(last)));
    return out;
  }
  // A path as git's headers write it: with a tab after it when it holds a space (git's, for
  // patch; a real tab would have quoted it), and "…" with C escapes around a name that holds
  // a control character, " or \: the host notes each of those with its real path
  // (file_changes_notes.files[].quoted), read here from `quoted`.
  function gitPath(token, quoted, prefixed) {
    let t = token.endsWith('\t') ? token.slice(0, -1) : token;
    const q = t.length > 1 && t.startsWith('"') && t.endsWith('"');
    if (q) t = t.slice(1, -1);
    if (prefixed) t = t.replace(/^[ab]\//, '');
    return q && quoted.has(t) ? quoted.get(t) : t;
  }
  // The new side's name on a `diff --git A B` line (a binary file or a mode change has no
  // +++ line): B quoted, or a/NAME b/NAME, the same name twice.
  function headerPath(rest, quoted) {
    if (rest.endsWith('"')) {
      const at = rest.lastIndexOf(' "b/');
      if (at >= 0) return gitPath(rest.slice(at + 1), quoted, true);
    }
    const half = (rest.length - 1) / 2;
    if (Number.isInteger(half) && rest.slice(2, half) === rest.slice(half + 3)) return rest.slice(half + 3);
    const at = rest.lastIndexOf(' b/');
    return at >= 0 ? rest.slice(at + 3) : rest;
  }
  const CUT_MARK = /^\[gradebox: file_changes truncated at (\d+) bytes: (\d+) of (\d+) bytes dropped\]$/;
  const IGNORED_MARK = "[gradebox: changed paths that the template's .gitignore files ignore";
  // The diff's files, each with its real name; the note that the cap cut the diff is taken
  // out of the last file's lines (`cut`: it is said at the top, and on that file).
  function parseDiff(text, quoted) {
    const files = [];
    let cur = null;
    let head = false; // in a file's header (before its first hunk): names may be read
    let cut = null;
    const lines = text.split('\n');
    while (lines.length && lines[lines.length - 1] === '') lines.pop();
    const m = lines.length ? CUT_MARK.exec(lines[lines.length - 1]) : null;
    if (m) { lines.pop(); cut = { cap: +m[1], dropped: +m[2], size: +m[3] }; }
    const start = (name, line) => { cur = { name, lines: [line], add: 0, del: 0, named: false }; files.push(cur); };
    for (const line of lines) {
      if (line.startsWith('diff --git ')) { start(headerPath(line.slice(11), quoted), line); head = true; continue; }
      if (line.startsWith(IGNORED_MARK)) { start('(paths .gitignore ignores, by name)', line); cur.named = true; head = false; continue; }
      if (!cur) { start('(changes)', line); continue; }
      cur.lines.push(line);
      if (head && line.startsWith('@@')) head = false;
      else if (head && line.startsWith('+++ ') && line !== '+++ /dev/null') { cur.name = gitPath(line.slice(4), quoted, true); cur.named = true; }
      else if (head && line.startsWith('--- ') && line !== '--- /dev/null' && !cur.named) cur.name = gitPath(line.slice(4), quoted, true);
      else if (head && (line.startsWith('rename to ') || line.startsWith('copy to '))) { cur.name = gitPath(line.slice(line.indexOf(' to ') + 4), quoted, false); cur.named = true; }
      else if (!head && line.startsWith('+')) cur.add += 1;
      else if (!head && line.startsWith('-')) cur.del += 1;
    }
    if (cut && files.length) files[files.length - 1].cutHere = true;
    return { files: files.filter((f) => f.lines.some((l) => l.length)), cut };
  }
  function diffLines(file, body, from) {
    const frag = document.createDocumentFragment();
    const end = Math.min(file.lines.length, from + DIFF_LINES);
    for (let i = from; i < end; i++) {
      const l = file.lines[i];
      const cls = l.startsWith('@@') ? 'hunk' : l.startsWith('+++') || l.startsWith('---') || l.startsWith('diff --git') || l.startsWith('index ') ? 'meta'
        : l.startsWith('+') ? 'add' : l.startsWith('-') ? 'del' : null;
      const div = h('div', { class: cls }, visible(l.length > SHOWN ? l.slice(0, SHOWN) : l));
      if (l.length > SHOWN) {
        const more = h('button', { type: 'button', class: 'more', onclick: () => { div.replaceChildren(visible(l)); } },
          `show the whole line (${l.length.toLocaleString()} characters)`);
        div.append(' ', more);
      }
      frag.append(div);
    }
    if (end < file.lines.length) {
      const more = h('button', { type: 'button', class: 'more', onclick: () => { more.remove(); diffLines(file, body, end); } }, `show ${Math.min(DIFF_LINES, file.lines.length - end)} more lines`);
      frag.append(more);
    }
    body.append(frag);
  }
  // Files of one diff drawn at once: a 1 MiB diff can name 11,000 files (100,000 elements,
  // seconds to open the test); the rest are drawn on request, DIFF_FILES at a time.
  const DIFF_FILES = 200;
  const bytesOf = (n) => `${Number(n).toLocaleString()} bytes`;
  // Why a file's content is not shown line by line, in words (file_changes_notes): a file
  // too large to diff must never read as if emptied.
  function cutWhy(f, notes) {
    const why = [];
    if (f.cutHere) why.push(`cut: the diff stops in this file, at the ${bytesOf(notes.cap)} workspace.max_diff keeps; what follows is not shown`);
    const note = f.note;
    if (note && note.cut) {
      const size = typeof note.size === 'number' ? bytesOf(note.size) : 'size unknown';
      const summary = 'a one-line summary (size, lines, digest) stands for it';
      why.push({
        binary: `binary (${size}): not diffed; "Binary files differ" or a one-line stand-in is shown`,
        size: `not diffed line by line: ${size}, over the ${bytesOf(notes.file_bytes)} a file is diffed within; ${summary}`,
        lines: `not diffed line by line: ${size}, over the ${Number(notes.file_lines).toLocaleString()} lines a file is diffed within; ${summary}`,
        sparse: `a file with holes (${size}): not diffed; a digest of its data stands for it`,
      }[note.cut] || `not diffed: ${note.cut}`);
    }
    return why;
  }
  // What the diff does not show, said above it: where the cap cut it, and which files are
  // not diffed line by line (each file says it too).
  function cutNote(cut, files, notes) {
    const out = [];
    if (cut) {
      const last = files.length ? files[files.length - 1].name : null;
      out.push(h('p', { class: 'cutnote', role: 'note' }, h('strong', null, 'Cut: '),
        `the diff is ${bytesOf(cut.size)}; the first ${bytesOf(cut.size - cut.dropped)} are shown (workspace.max_diff keeps ${bytesOf(cut.cap)}). `,
        last !== null ? ['It stops inside ', h('code', null, visibleName(last)), `; ${notes && notes.paths ? `of the ${notes.paths.toLocaleString()} paths changed, ` : ''}those after it are not shown.`] : null));
    }
    const cutFiles = notes ? (notes.files || []).filter((f) => f.cut) : [];
    if (cutFiles.length || (notes && notes.more)) {
      const by = new Map();
      for (const f of cutFiles) by.set(f.cut, (by.get(f.cut) || 0) + 1);
      const words = { binary: 'binary', size: `over ${bytesOf(notes.file_bytes)}`, lines: `over ${Number(notes.file_lines).toLocaleString()} lines`, sparse: 'with holes' };
      out.push(h('p', { class: 'cutnote', role: 'note' }, h('strong', null, 'Not diffed line by line: '),
        `${cutFiles.length} file${cutFiles.length === 1 ? '' : 's'} (${[...by].map(([k, n]) => `${words[k] || k}: ${n}`).join(', ')}); each stands as a one-line summary or "Binary files differ", and says so below.`,
        notes.more ? ` ${notes.more.toLocaleString()} more files with a quoted name or content not diffed are not listed.` : ''));
    }
    return out;
  }
  function diff(text, bytes, notes) {
    const quoted = new Map();
    const byPath = new Map();
    for (const f of (notes && notes.files) || []) {
      if (f.quoted) quoted.set(f.quoted, f.path);
      byPath.set(f.path, f);
    }
    const { files, cut } = parseDiff(text, quoted);
    for (const f of files) f.note = byPath.get(f.name);
    const total = files.reduce((a, f) => a + f.lines.length, 0);
    const list = h('ul', { class: 'filelist' });
    const blocks = h('div');
    const drawFiles = (from) => {
      const end = Math.min(files.length, from + DIFF_FILES);
      for (const f of files.slice(from, end)) {
        const why = cutWhy(f, notes || { cap: cut ? cut.cap : 0 });
        const label = () => [f.cutHere ? h('span', { class: 'cutwhy' }, '✂ cut here') : null,
          f.note && f.note.cut ? h('span', { class: 'cutwhy' }, '⚠ not diffed') : null];
        list.append(h('li', null, visibleName(f.name), ' ', h('span', { class: 'plus' }, `+${f.add}`), ' ', h('span', { class: 'minus' }, `−${f.del}`), ' ', label()));
        const body = h('div', { class: 'diffbody' });
        const d = h('details', { class: 'file', open: total <= 400 || !!f.cutHere },
          h('summary', null, h('span', null, visibleName(f.name)), h('span', { class: 'plus' }, `+${f.add}`), h('span', { class: 'minus' }, `−${f.del}`), label()),
          why.map((w) => h('p', { class: 'cutnote', role: 'note' }, w)), body);
        let drawn = false;
        const draw = () => { if (!drawn && d.open) { drawn = true; diffLines(f, body, 0); } };
        d.addEventListener('toggle', draw);
        draw();
        blocks.append(d);
      }
      if (end < files.length) {
        const more = h('button', { type: 'button', class: 'more', onclick: () => { more.remove(); drawFiles(end); } },
          `show ${Math.min(DIFF_FILES, files.length - end)} more files (${(files.length - end).toLocaleString()} not shown)`);
        blocks.append(more);
      }
    };
    // The files are drawn when the diff is first unfolded: a folded diff costs nothing.
    const small = total <= 400 && !cut;
    const changes = h('details', { class: 'changes', open: small },
      h('summary', null, h('h4', null, `the agent's changes: ${files.length} file${files.length === 1 ? '' : 's'}${cut && notes ? ` shown of ${notes.paths.toLocaleString()} paths changed` : ''}, ${bytes.toLocaleString()} bytes`),
        cut ? h('span', { class: 'cutwhy' }, `✂ cut at ${bytesOf(cut.cap)}: ${bytesOf(cut.dropped)} not shown`) : null),
      cutNote(cut, files, notes), list, blocks);
    let filled = false;
    const fill = () => { if (!filled && changes.open) { filled = true; drawFiles(0); } };
    changes.addEventListener('toggle', fill);
    fill();
    return changes;
  }
  // What decided the test, before anything it read: each grader that did not pass, with
  // its failing checks (a click goes to its evidence, just below).
  function verdicts(row, blocks) {
    const items = [];
    (row.graders || []).forEach((g, i) => {
      if (g.status === 'passed') return;
      // Its failing checks, else its failing assertions (an assert-set's children), else
      // the last line of its evidence.
      const failing = [...(g.checks || []).filter((c) => !c.passed).map((c) => c.text),
        ...(g.children || []).filter((c) => c.status !== 'passed').map((c) => `${c.name}: ${c.status}${c.evidence ? ` — ${oneLine(c.evidence, 200)}` : ''}`)];
      const go = h('button', { type: 'button', class: 'linkish', onclick: () => blocks[i].scrollIntoView({ block: 'start' }) }, visible(g.name));
      items.push(h('li', null, badge(g.status), ' ', go, ' ',
        failing.length ? h('ul', null, failing.slice(0, 20).map((text) => h('li', null, h('span', { class: 'st-failed' }, '✘ '), visible(oneLine(text, 300)))),
          failing.length > 20 ? h('li', { class: 'muted' }, `${failing.length - 20} more failing`) : null)
          : h('span', { class: 'muted' }, visible(oneLine(g.evidence || g.stderr_tail || '', 300)))));
    });
    if (!items.length) return null;
    return [h('h4', null, 'verdicts: what did not pass'), h('ul', { class: 'verdicts' }, items)];
  }
  function changes(row) {
    return row.file_changes ? diff(row.file_changes, row.file_changes_bytes || new TextEncoder().encode(row.file_changes).length, row.file_changes_notes)
      : row.file_changes_bytes ? h('p', { class: 'muted' }, `the agent changed ${row.file_changes_bytes} bytes (this run kept no diff)`) : null;
  }
  // A test run several times whose trials kept their answers and graders: one tab per trial,
  // the failing ones first (what a reader opens the test for), each drawn when chosen. While
  // a text search is on, the first trial that holds it is chosen. Runs that kept only each
  // trial's verdict get the list of verdicts instead (null here).
  let tabSeq = 0;
  function trialTabs(summary, row) {
    const trials = row.trials || [];
    if (!trials.some((tr) => tr.output !== undefined || (tr.graders && tr.graders.length) || tr.file_changes)) return null;
    const order = trials.map((tr, i) => [tr, i]).sort((a, b) => (ORDER[a[0].status] ?? 3) - (ORDER[b[0].status] ?? 3) || a[1] - b[1]);
    const base = `trial-${++tabSeq}`;
    const panel = h('div', { role: 'tabpanel', class: 'trialpanel', tabindex: '0' });
    const list = h('div', { role: 'tablist', class: 'trialtabs', 'aria-label': 'trials, failing first' });
    const tabs = order.map(([tr, i], at) => h('button', {
      type: 'button', role: 'tab', id: `${base}-${i}`, 'aria-controls': `${base}-panel`, class: `trialtab st-${tr.status}`,
      onclick: () => select(at),
      onkeydown: (e) => {
        const to = { ArrowRight: at + 1, ArrowLeft: at - 1, Home: 0, End: tabs.length - 1 }[e.key];
        if (to === undefined) return;
        e.preventDefault();
        select((to + tabs.length) % tabs.length); tabs[(to + tabs.length) % tabs.length].focus();
      },
    }, tr.status === 'passed' ? '✔' : tr.status === 'failed' ? '✘' : '!', ` trial ${i + 1}`, h('span', { class: 'muted' }, ` ${num(tr.score)}`)));
    panel.id = `${base}-panel`;
    list.append(...tabs);
    function select(at) {
      const [tr, i] = order[at];
      tabs.forEach((b, j) => { b.setAttribute('aria-selected', j === at ? 'true' : 'false'); b.tabIndex = j === at ? 0 : -1; });
      panel.setAttribute('aria-labelledby', `${base}-${i}`);
      const graders = (tr.graders || []).map(grader); // the verdicts first, as a test's
      panel.replaceChildren(...[
        kv([['trial', `${i + 1} of ${trials.length}`], ['status', badge(tr.status)], ['score', num(tr.score, 3)],
          ['gates failed', (tr.gates_failed || []).join(', ')], ['error', tr.error ? textBlock(tr.error) : '']]),
        verdicts(tr, graders),
        h('h4', { class: 'graders-head' }, `graders (${(tr.graders || []).length})`),
        graders,
        tr.output !== undefined ? [h('h4', null, 'output'), textBlock(tr.output)] : null,
        changes(tr)].flat(Infinity).filter(Boolean));
    }
    const q = state.q && !state.re ? state.q.toLowerCase() : '';
    const hit = q ? order.findIndex(([tr]) => trialText(tr, []).join('\n').toLowerCase().includes(q)) : -1;
    select(Math.max(0, hit));
    return [h('h4', null, `trials (${trials.length})`), marks(summary), list, panel];
  }
  // ---------------------------------------------------------------- one test, every run
  // On a page of several runs an opened test shows each run in a column of its own, labelled
  // with the run, row by row (verdict, answer, each grader by its name), so what one run did
  // differently stands beside what the other did. A narrow screen stacks the columns, each
  // cell labelled with its run (CSS: data-run).
  const runLabel = (i) => `${i + 1}: ${marked(runs[i].name)}${i === 0 ? ' (baseline)' : ''}`;
  function runBadge(status, i) {
    return h('span', { class: `badge ${status || 'none'}`, title: `${runLabel(i)}: ${status || 'not run'}` },
      status ? LABEL[status] : 'not run', h('span', { class: 'runname' }, ' · ', visible(runs[i].name)));
  }
  // A result's graders by name (a second of the same name is "name #2"), in its order.
  function gradersByName(row) {
    const out = new Map();
    for (const g of (row && row.graders) || []) {
      let key = g.name, n = 1;
      while (out.has(key)) key = `${g.name} #${++n}`;
      out.set(key, g);
    }
    return out;
  }
  function sideBySide(t) {
    const rows = t.rows.map((r) => (r ? full(r) : null));
    const first = rows.find(Boolean);
    const body = h('tbody');
    // One labelled row of cells, one per run; left out when no run has anything for it.
    const line = (label, cell, opts = {}) => {
      const cells = rows.map((r, i) => (r ? cell(r, i) : null));
      if (!opts.always && cells.every((c) => c === null || c === undefined || c === '' || (Array.isArray(c) && !c.length))) return;
      const present = rows.map((r, i) => (r ? opts.verdict && opts.verdict(r, i) : null)).filter((v) => v !== null);
      const differs = opts.verdict && present.some((v) => v !== present[0]);
      body.append(h('tr', { class: `label${differs ? ' differs' : ''}` }, h('th', { colspan: runs.length, scope: 'colgroup' },
        visible(label), differs ? h('span', { class: 'changed' }, ' · differs between runs') : null)));
      body.append(h('tr', { class: 'cells' }, cells.map((c, i) => h('td', { 'data-run': runLabel(i) },
        rows[i] || !opts.always ? c : h('span', { class: 'muted' }, 'not run in this run')))));
    };
    line('verdict', (r, i) => [runBadge(r.status, i), ' ', `score ${num(r.score, 3)}`, ' ', marks(t.rows[i])], { always: true, verdict: (r) => r.status });
    line('why not passed', (r, i) => (r.status === 'passed' ? null : r.error ? textBlock(r.error) : visible(why(t.rows[i]))));
    const timings = (r) => Object.entries(r.timings_ms || {}).map(([k, v]) => `${k} ${ms(v)}`).join(', ');
    line('run', (r) => {
      const facts = kv([['threshold', r.threshold], ['gates failed', (r.gates_failed || []).join(', ')], ['timings', timings(r)],
        ['started', r.started_at && when(r.started_at)], ['node', r.node], ['attempts', r.attempts],
        ['details dropped', r.details_dropped ? 'yes: the result could not be written whole' : '']]);
      return facts.childElementCount ? facts : null;
    });
    line('trials', (r) => (r.trials ? h('ul', { class: 'checks' }, r.trials.map((tr, k) => h('li', null,
      `trial ${k + 1}: `, h('span', { class: `st-${tr.status}` }, tr.status), `, score ${num(tr.score)}`, tr.error ? [' — ', visible(oneLine(tr.error))] : null))) : null));
    // The test's question and expected answer, once when every run asked the same.
    const same = (key) => new Set(rows.filter(Boolean).map((r) => JSON.stringify(r[key] ?? null))).size <= 1;
    const asked = ['input', 'expected_output'].filter(same);
    if (!asked.includes('input')) line('input', (r) => messages('input', r.input));
    line('answer', (r) => (r.output !== undefined ? textBlock(r.output) : null), { verdict: (r) => JSON.stringify(r.output ?? null) });
    if (!asked.includes('expected_output')) line('expected output', (r) => messages('expected output', r.expected_output));
    line('target', (r) => (r.target ? [kv([['exit code', r.target.exit_code], ['duration', ms(r.target.duration_ms || 0)],
      ['ended', [r.target.timed_out && 'timed out', signal(r.target.exit_code)].filter(Boolean).join(', ')]]),
    r.target.stderr_tail ? textBlock(r.target.stderr_tail) : null] : null));
    line("the agent's changes", changes);
    const graders = rows.map(gradersByName);
    const names = [...new Set(graders.flatMap((m) => [...m.keys()]))];
    for (const name of names) {
      line(`grader ${name}`, (r, i) => (graders[i].has(name) ? grader(graders[i].get(name))
        : h('span', { class: 'muted' }, 'no grader of this name in this run')), { verdict: (r, i) => (graders[i].has(name) ? graders[i].get(name).status : 'none') });
    }
    line("the agent's steps", steps);
    line('metadata', (r) => (r.metadata && Object.keys(r.metadata).length ? textBlock(r.metadata) : null));
    return h('div', { class: 'opened' },
      kv([['test', first.id.length > 500 ? textBlock(first.id) : first.id]]),
      asked.includes('input') ? messages('input', first.input) : null,
      asked.includes('expected_output') ? messages('expected output', first.expected_output) : null,
      h('table', { class: 'side', 'aria-label': 'this test in each run' },
        h('thead', null, h('tr', null, rows.map((r, i) => h('th', { scope: 'col' }, visible(runLabel(i)))))), body));
  }
  // ---------------------------------------------------------------- the agent's steps
  // The transcript the result kept (role, text, tool calls with their arguments and result),
  // drawn as a timeline, with the checks that read it (type "trace") beside it: each links
  // to the calls its verdict names. A check inside a conversation's turn read that turn's
  // answer, not this transcript: it is listed, not linked.
  const STEPS = 40; // messages drawn before "show more"
  const FOLDED = 400; // characters of a call's result shown without opening it
  const LINKS = 20; // calls linked from one check (a check over every call names them all)
  const ROLES = new Set(['system', 'user', 'assistant', 'tool']);
  function traceChecks(graders, out = [], inTurn = false) {
    for (const g of graders || []) {
      if (g.type === 'trace') out.push({ g, linked: !inTurn });
      traceChecks(g.children, out, inTurn || g.type === 'turn');
    }
    return out;
  }
  function tokensOf(u) {
    if (!u || (typeof u.input !== 'number' && typeof u.output !== 'number')) return null;
    return `${u.input ?? '–'} in, ${u.output ?? '–'} out tokens`;
  }
  function callResult(out) {
    const text = typeof out === 'string' ? out : JSON.stringify(out, null, 2);
    if (text.length <= FOLDED && text.split('\n').length <= 8) return [h('div', { class: 'label muted' }, 'result'), textBlock(text)];
    const d = h('details', { class: 'result' }, h('summary', null, `result (${text.length.toLocaleString()} characters)`));
    d.addEventListener('toggle', () => { if (d.open && d.childNodes.length === 1) d.append(textBlock(text)); });
    return d;
  }
  function toolStep(c, readers, drawnCalls) {
    const el = h('div', { class: `call${c.error ? ' call-error' : ''}`, 'data-call': c.position, tabindex: '-1' },
      h('div', { class: 'head' }, h('span', { class: 'tool' }, '⚙ ', visible(c.name)), h('span', { class: 'muted' }, `call #${c.position}`),
        typeof c.duration_ms === 'number' ? h('span', { class: 'muted' }, ms(c.duration_ms)) : null,
        c.error ? h('span', { class: 'st-error' }, 'error') : null,
        c.cut ? h('span', { class: 'muted' }, 'cut') : null,
        (readers || []).map(({ g }) => h('span', { class: `reader st-${g.status}`, title: 'a check whose verdict names this call' },
          g.passed ? '✔ ' : g.status === 'error' ? '! ' : '✘ ', visible(g.name)))),
      c.args !== undefined && c.args !== null ? [h('div', { class: 'label muted' }, 'arguments'), textBlock(c.args)] : null,
      c.output !== undefined && c.output !== null ? callResult(c.output) : null);
    drawnCalls.set(c.position, el);
    return el;
  }
  function step(st, i, byCall, drawnCalls) {
    const role = ROLES.has(st.role) ? st.role : 'other';
    const text = st.text !== undefined && st.text !== null && st.text !== '' ? textBlock(st.text) : null;
    return h('li', { class: `step role-${role}` },
      h('div', { class: 'head' }, h('span', { class: 'role' }, visible(st.role)), h('span', { class: 'muted' }, `#${i + 1}`),
        typeof st.duration_ms === 'number' ? h('span', { class: 'muted' }, ms(st.duration_ms)) : null,
        tokensOf(st.token_usage) ? h('span', { class: 'muted' }, tokensOf(st.token_usage)) : null,
        st.cut ? h('span', { class: 'muted' }, 'text cut') : null),
      text, (st.tool_calls || []).map((c) => toolStep(c, byCall.get(c.position), drawnCalls)));
  }
  function steps(row) {
    const tr = row.transcript;
    if (!tr || !tr.steps || !tr.steps.length) return null;
    const checks = traceChecks(row.graders);
    const byCall = new Map();
    for (const c of checks) {
      if (!c.linked) continue;
      for (const p of c.g.calls || []) { if (!byCall.has(p)) byCall.set(p, []); byCall.get(p).push(c); }
    }
    const kept = new Map(); // position -> the call, as the result kept it
    for (const st of tr.steps) for (const c of st.tool_calls || []) kept.set(c.position, c);
    const list = h('ol', { class: 'timeline' });
    const drawnCalls = new Map(); // position -> its element, once drawn
    let drawn = 0;
    const more = h('button', { type: 'button', class: 'more' });
    const draw = (upto) => {
      const end = Math.min(tr.steps.length, upto);
      for (; drawn < end; drawn++) list.append(step(tr.steps[drawn], drawn, byCall, drawnCalls));
      if (drawn < tr.steps.length) more.textContent = `show ${Math.min(STEPS, tr.steps.length - drawn)} more messages (${(tr.steps.length - drawn).toLocaleString()} not shown)`;
      else more.remove();
    };
    more.addEventListener('click', () => draw(drawn + STEPS));
    // A link to a call not drawn yet draws the messages up to it first.
    const goTo = (p) => {
      if (!drawnCalls.has(p)) {
        const at = tr.steps.findIndex((st) => (st.tool_calls || []).some((c) => c.position === p));
        if (at >= 0) draw(at + 1);
      }
      const el = drawnCalls.get(p);
      if (!el) return;
      for (const old of list.querySelectorAll('.call.hit')) old.classList.remove('hit');
      el.classList.add('hit');
      el.scrollIntoView({ block: 'center' });
      el.focus({ preventScroll: true });
    };
    const aside = h('aside', { class: 'readers', 'aria-label': 'checks that read these steps' }, h('h4', null, `checks that read them (${checks.length})`),
      checks.length ? null : h('p', { class: 'muted' }, 'no trace check read this transcript'),
      checks.map(({ g, linked }) => h('div', { class: 'reader-check' },
        h('div', { class: 'head' }, badge(g.status), h('span', { class: 'name' }, visible(g.name)), h('span', { class: 'muted' }, `score ${num(g.score)}`)),
        g.evidence ? h('div', { class: 'evidence' }, visible(oneLine(g.evidence, 300))) : null,
        !linked ? h('div', { class: 'muted' }, 'read its turn\'s answer') : (g.calls || []).length
          ? h('div', { class: 'links' }, 'names ', g.calls.slice(0, LINKS).map((p) => (kept.has(p)
            ? h('button', { type: 'button', class: 'call-link', onclick: () => goTo(p) }, `#${p} `, visible(kept.get(p).name))
            : h('span', { class: 'muted' }, `#${p} (not kept)`))),
          g.calls.length > LINKS ? h('span', { class: 'muted' }, `and ${(g.calls.length - LINKS).toLocaleString()} more`) : null)
          : h('div', { class: 'muted' }, 'reads the whole run'))));
    draw(STEPS);
    const calls = tr.tool_calls || 0;
    return h('section', { class: 'steps', 'aria-label': 'the agent\'s steps' },
      h('h4', null, `steps: ${(tr.messages || tr.steps.length).toLocaleString()} message${tr.messages === 1 ? '' : 's'}, ${calls.toLocaleString()} tool call${calls === 1 ? '' : 's'}`),
      (tr.cut || []).length ? h('p', { class: 'cut', role: 'note' }, `cut: ${tr.cut.join('; ')}`) : null,
      h('div', { class: 'steps-grid' }, h('div', { class: 'timeline-wrap' }, list, drawn < tr.steps.length ? more : null), aside));
  }
  function detail(t, summary) {
    if (multi) return sideBySide(t);
    if (!summary) return h('p', null, 'not run in this run');
    const row = full(summary);
    const target = row.target;
    const other = multi ? h('div', null, h('h4', null, 'in each run'), kv(t.rows.map((r, i) => [runs[i].name, r ? `${r.status}, score ${num(r.score)}` : 'not run']))) : null;
    const timings = Object.entries(row.timings_ms || {}).map(([k, v]) => `${k} ${ms(v)}`).join(', ');
    const tabbed = trialTabs(summary, row); // each trial's answer and graders: shown there
    const graders = tabbed ? [] : (row.graders || []).map(grader);
    return h('div', { class: 'opened' },
      kv([['test', row.id.length > 500 ? textBlock(row.id) : row.id], ['status', badge(row.status)], ['score', num(row.score, 3)], ['threshold', row.threshold], ['gates failed', (row.gates_failed || []).join(', ')],
        ['error', row.error ? textBlock(row.error) : ''], ['timings', timings], ['started', row.started_at && when(row.started_at)], ['finished', row.finished_at && when(row.finished_at)],
        ['node', row.node], ['attempts', row.attempts], ['details dropped', row.details_dropped ? 'yes: the result could not be written whole' : '']]),
      other,
      // The verdicts first, then each grader's evidence; what the agent read and wrote after
      // them, its diff folded (a diff of 306 files put the graders 12,785 px down).
      tabbed ? null : [verdicts(row, graders), h('h4', { class: 'graders-head' }, `graders (${(row.graders || []).length})`), graders],
      tabbed || (row.trials ? [h('h4', null, 'trials'), marks(summary), h('ul', { class: 'checks' }, row.trials.map((tr, i) => h('li', null,
        `trial ${i + 1}: `, h('span', { class: `st-${tr.status}` }, tr.status), `, score ${num(tr.score)}`, tr.error ? [' — ', visible(oneLine(tr.error))] : null)))] : null),
      messages('input', row.input),
      row.output !== undefined && !tabbed ? [h('h4', null, 'output'), textBlock(row.output)] : null,
      messages('expected output', row.expected_output),
      steps(row),
      target ? [h('h4', null, 'target'), kv([['exit code', target.exit_code], ['duration', ms(target.duration_ms || 0)], ['ended', [target.timed_out && 'timed out', signal(target.exit_code)].filter(Boolean).join(', ')]]),
        target.stderr_tail ? textBlock(target.stderr_tail) : null] : null,
      tabbed ? null : changes(row),
      row.metadata && Object.keys(row.metadata).length ? [h('h4', null, 'metadata'), textBlock(row.metadata)] : null);
  }

  // ---------------------------------------------------------------- the page
  let headerEl, chartsEl, trialsEl;
  function build() {
    readHash();
    headerEl = header();
    chartsEl = charts();
    trialsEl = trialsSection() || h('div');
    table = h('table', { class: 'tests', 'aria-labelledby': 'h-tests' },
      h('colgroup', null, ['c-id', 'c-st', 'c-score', 'c-graders', 'c-dur', 'c-why'].map((c) => h('col', { class: c }))));
    thead = h('thead');
    tbody = h('tbody');
    table.append(thead, tbody);
    pager = h('nav', { class: 'pager', 'aria-label': 'pages' });
    app.replaceChildren(headerEl, chartsEl, comparisons() || h('div'), trialsEl,
      h('section', { 'aria-labelledby': 'h-tests' }, h('h2', { id: 'h-tests' }, 'Tests'), filterBar(), table, pager),
      h('p', { class: 'keys' }, 'Keys: ', h('kbd', null, '/'), ' search, ', h('kbd', null, 'j'), ' / ', h('kbd', null, 'k'), ' next / previous test, ',
        h('kbd', null, 'Enter'), ' open or close it, ', h('kbd', null, '['), ' / ', h('kbd', null, ']'), ' previous / next page.'));
    refreshOptions();
    syncControls();
    refreshTable();
    narrowOrder();
  }
  // On a narrow screen (a phone) the tests come right under the header, the charts and the
  // comparison after them; the stylesheet's rule of the same width stacks each row. Moved in
  // the document, not only drawn elsewhere (CSS order), so the keyboard and a screen reader
  // meet them in the order shown.
  const NARROW = window.matchMedia('(max-width: 700px)');
  function narrowOrder() {
    const section = document.getElementById('h-tests').parentElement;
    if (NARROW.matches) headerEl.after(section);
    else app.querySelector('p.keys').before(section);
  }
  NARROW.addEventListener('change', narrowOrder);
  function refreshAll() {
    const y = window.scrollY;
    const nh = header(); headerEl.replaceWith(nh); headerEl = nh;
    const nc = charts(); chartsEl.replaceWith(nc); chartsEl = nc;
    const nt = trialsSection() || h('div'); trialsEl.replaceWith(nt); trialsEl = nt;
    refreshOptions();
    refreshTable();
    window.scrollTo(0, y);
  }
  document.addEventListener('keydown', (e) => {
    const typing = e.target instanceof HTMLInputElement || e.target instanceof HTMLSelectElement;
    if (e.key === '/' && !typing) { e.preventDefault(); controls.q.focus(); return; }
    if (e.key === 'Escape' && e.target === controls.q) { controls.q.blur(); return; }
    if (typing || e.ctrlKey || e.metaKey || e.altKey) return;
    const toggles = [...tbody.querySelectorAll('button.toggle')];
    const at = toggles.indexOf(document.activeElement);
    if (e.key === 'j' || e.key === 'k') {
      const next = toggles[Math.max(0, Math.min(toggles.length - 1, at + (e.key === 'j' ? 1 : -1)))];
      if (next) { next.focus(); next.scrollIntoView({ block: 'nearest' }); }
    } else if (e.key === ']' || e.key === '[') {
      state.page = Math.max(0, state.page + (e.key === ']' ? 1 : -1));
      refreshTable();
    }
  });
  window.addEventListener('hashchange', () => { readHash(); syncControls(); refreshTable(); });

  // ---------------------------------------------------------------- live: gradebox view
  // What the run is doing, in words (the colour is only a second sign): green only while a
  // process is running it.
  function liveBadge(run) {
    const c = counts(run);
    const { state, note } = DATA.live.state;
    const done = `${c.done} of ${c.planned} tests done`;
    const text = {
      waiting: `waiting: ${note}`,
      running: `live: running, ${done}`,
      finished: `finished: ${done}`,
      interrupted: `interrupted: ${done}; gradebox run --resume continues it`,
      stale: `${note}; ${done}`,
    }[state] || note;
    const cls = { running: 'ok', waiting: 'wait', finished: 'done' }[state] || 'down';
    return h('span', { class: `live ${cls}`, id: 'live', 'data-state': state, role: 'status' }, text);
  }
  if (DATA.live) {
    let cursor = DATA.live;
    const poll = async () => {
      const live = document.getElementById('live');
      try {
        const url = `api/results?offset=${encodeURIComponent(cursor.offset)}&file=${encodeURIComponent(cursor.file)}&plan=${encodeURIComponent(cursor.plan_tag)}`;
        const res = await fetch(url, { cache: 'no-store', credentials: 'omit' });
        if (!res.ok) throw new Error(`HTTP ${res.status}`);
        const d = await res.json();
        cursor = d;
        const run = runs[0];
        let changed = false;
        if (d.reset) { run.rows = []; changed = true; }
        const at = new Map(run.rows.map((r, i) => [r.id, i]));
        for (const row of d.rows) {
          if (at.has(row.id)) run.rows[at.get(row.id)] = row;
          else { at.set(row.id, run.rows.length); run.rows.push(row); }
          changed = true;
        }
        if (JSON.stringify(d.summary) !== JSON.stringify(run.summary)) { run.summary = d.summary; changed = true; }
        if (d.plan !== undefined) { run.plan = d.plan; changed = true; }
        if (JSON.stringify(d.state) !== JSON.stringify(DATA.live.state)) { DATA.live.state = d.state; changed = true; }
        if (changed) { statsCache = new Map(); index(); refreshAll(); }
        const el = document.getElementById('live');
        if (el) { const b = liveBadge(run); b.title = `checked ${new Date().toLocaleTimeString()}`; el.replaceWith(b); }
      } catch (err) {
        if (live) { live.className = 'live down'; live.textContent = 'live: the view stopped answering'; }
      }
      setTimeout(poll, 1000);
    };
    setTimeout(poll, 1000);
  }
  build();
  performance.mark('gradebox-drawn');
  // Once the page is idle, each test's searchable text is read ahead, a slice at a time, so
  // the first search of a large run does not wait for it.
  if (window.requestIdleCallback) {
    let next = 0;
    const ahead = (deadline) => {
      while (next < tests.length && deadline.timeRemaining() > 2) haystack(tests[next++]);
      if (next < tests.length) requestIdleCallback(ahead);
    };
    requestIdleCallback(ahead);
  }
})();
