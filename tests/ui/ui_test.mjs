// ui_test.mjs - the web console in a real browser: Debian's chromium, headless,
// driven by playwright-core. Run by tests/ui_test.sh, which starts the daemons
// and passes everything through the environment:
//   RETRYD_UI_URL          retryd with --auth-token-file
//   RETRYD_UI_NOREDIS_URL  a second retryd whose Redis is a dead port
//   RETRYD_UI_TOKEN        the bearer token (--auth-token-file's: admin)
//   RETRYD_UI_READER_TOKEN a --token-file token with the reader role only
//   RETRYD_UI_PREFIX       the key prefix of both (for the large queue)
//   RETRYD_UI_REDIS_PORT   the Redis the first one uses
//   RETRYD_UI_SHOTS        where screenshots go
//   RETRYD_UI_TMP          a temp dir (browser profile, seed files)
//   RETRYD_UI_CHROMIUM     /usr/bin/chromium
//   RETRYD_UI_LARGE        dead letters in the large queue (100000; 0 skips)
// Arguments: test names to run (default all). Output: cmocka's plain text.

import { chromium } from 'playwright-core';
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';

const env = process.env;
const BASE = env.RETRYD_UI_URL;
const NOREDIS = env.RETRYD_UI_NOREDIS_URL;
const TOKEN = env.RETRYD_UI_TOKEN;
const READER_TOKEN = env.RETRYD_UI_READER_TOKEN;
const PREFIX = env.RETRYD_UI_PREFIX;
// The Functions library (its version is in its name); functions are <library>_<name>.
const LIBRARY = env.RETRYD_UI_LIBRARY;
const REDIS_PORT = env.RETRYD_UI_REDIS_PORT;
const SHOTS = env.RETRYD_UI_SHOTS;
const TMP = env.RETRYD_UI_TMP;
const CHROMIUM = env.RETRYD_UI_CHROMIUM || '/usr/bin/chromium';
const LARGE = env.RETRYD_UI_LARGE === undefined ? 100000 : Number(env.RETRYD_UI_LARGE);
for (const [k, v] of Object.entries({ BASE, NOREDIS, TOKEN, READER_TOKEN, PREFIX, LIBRARY, REDIS_PORT, SHOTS, TMP })) {
  if (!v) { console.log(`ui_test.mjs: ${k} is not set (run tests/ui_test.sh)`); process.exit(2); }
}

const XSS = '<script>alert(1)</script>"\'';
const ODD_QUEUE = 'webhooks/eu <img src=x onerror=alert(2)>';
const CSV_PAYLOAD = 'name,"quoted"\r\nsecond line';
const CSV_ERROR = 'quota exceeded, "daily" limit\nretry tomorrow';
const WELCOME_PAYLOAD = JSON.stringify({
  to: 'ada@example.com', template: 'welcome',
  vars: { first_name: 'Ada', plan: 'pro', locale: 'en-GB' }, attempt_id: '7f3c9a2e',
});

// ---------------------------------------------------------------------------
// Checks
// ---------------------------------------------------------------------------
class CheckError extends Error {}
function check(cond, what) { if (!cond) throw new CheckError(what); }
function eq(actual, expected, what) {
  const a = JSON.stringify(actual);
  const e = JSON.stringify(expected);
  if (a !== e) throw new CheckError(`${what}\n      actual:   ${a}\n      expected: ${e}`);
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------
// The HTTP API (seeding and checking, independent of the console)
// ---------------------------------------------------------------------------
async function http(method, p, body, opts = {}) {
  const headers = { Accept: 'application/json' };
  const token = opts.token === undefined ? TOKEN : opts.token;
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch((opts.base || BASE) + p, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body), redirect: 'manual',
  });
  const text = await res.text();
  let json = null;
  try { json = text ? JSON.parse(text) : null; } catch { json = null; }
  return { status: res.status, json, headers: res.headers, text };
}
async function ok(method, p, body) {
  const r = await http(method, p, body);
  if (r.status >= 300) throw new Error(`${method} ${p}: ${r.status} ${r.text}`);
  return r.json;
}
const qp = (q) => `/queues/${encodeURIComponent(q)}`;
const enqueue = (q, payload, extra) => ok('POST', `${qp(q)}/messages`, { payload, ...extra });
async function claimAll(q, count, lease = 600) {
  const r = await http('POST', `${qp(q)}/claim?count=${count}&lease_seconds=${lease}`);
  return r.status === 204 ? [] : r.json.messages;
}
async function getMsg(q, id) { return http('GET', `${qp(q)}/messages/${id}`); }
async function listAll(q, status, extra = '') {
  const out = [];
  let cursor = '';
  do {
    const r = await ok('GET', `${qp(q)}/messages?status=${status}&limit=1000${extra}` +
      (cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''));
    out.push(...r.messages);
    cursor = r.next_cursor;
  } while (cursor);
  return out;
}

/** Dead letters [{payload, error}] in queue q (which has nothing pending). */
async function makeDead(q, items) {
  const ids = [];
  for (const it of items) ids.push((await enqueue(q, it.payload, { max_retries: 1 })).id);
  const claimed = await claimAll(q, items.length);
  eq(claimed.map((m) => m.id).sort((a, b) => a - b), ids, `claim the new messages of ${q}`);
  for (let i = 0; i < ids.length; i++) {
    await ok('POST', `${qp(q)}/messages/${ids[i]}/fail`, { error: items[i].error });
  }
  return ids;
}
async function makeSucceeded(q, n) {
  for (let i = 0; i < n; i++) await enqueue(q, JSON.stringify({ job: 'report', n: i }));
  for (const m of await claimAll(q, n)) await ok('POST', `${qp(q)}/messages/${m.id}/succeed`, {});
}

const seed = { T: null, emailsDead: {}, welcomeId: null, xssId: null, csvId: null, textId: null,
               pendingJsonId: null };

async function seedData() {
  const smtp = 'smtp: connection refused (mx1.example.com:25)';
  const unknown = 'smtp: 550 5.1.1 user unknown';
  const ids = await makeDead('emails', [
    ...[1, 2, 3, 4].map((i) => ({ payload: JSON.stringify({ to: `user${i}@example.com`, template: 'welcome' }), error: smtp })),
    ...[5, 6].map((i) => ({ payload: JSON.stringify({ to: `user${i}@example.org`, template: 'receipt' }), error: unknown })),
    { payload: WELCOME_PAYLOAD, error: 'template \'welcome\' missing variable "name"' },
    { payload: XSS, error: XSS },
    { payload: CSV_PAYLOAD, error: CSV_ERROR },
  ]);
  seed.emailsDead = { smtp: ids.slice(0, 4), unknown: ids.slice(4, 6) };
  seed.welcomeId = ids[6];
  seed.xssId = ids[7];
  seed.csvId = ids[8];
  await makeSucceeded('emails', 3);
  await enqueue('emails', JSON.stringify({ to: 'grace@example.com', template: 'digest' }));
  await claimAll('emails', 1, 3600); // one processing under a long lease
  seed.pendingJsonId = (await enqueue('emails', JSON.stringify({ to: 'linus@example.com', template: 'welcome' }))).id;
  seed.textId = (await enqueue('emails', 'plain text payload, not JSON')).id;
  await enqueue('emails', JSON.stringify({ to: 'alan@example.com', template: 'digest' }), { delay_seconds: 600 });

  await makeDead('billing', [1, 2].map((i) => ({ payload: JSON.stringify({ invoice: `INV-10${i}` }),
                                                 error: 'gateway timeout after 30 s' })));
  // T: a whole second strictly between the two batches of billing's dead letters.
  await sleep(1100 - (Date.now() % 1000));
  seed.T = new Date(Math.floor(Date.now() / 1000) * 1000).toISOString();
  await sleep(250);
  seed.billingRecent = await makeDead('billing', [3, 4, 5].map((i) => ({
    payload: JSON.stringify({ invoice: `INV-10${i}`, amount_cents: 1299 * i }),
    error: 'card declined: insufficient funds' })));
  await enqueue('billing', JSON.stringify({ invoice: 'INV-200' }));
  await enqueue('billing', JSON.stringify({ invoice: 'INV-201' }));

  await makeDead(ODD_QUEUE, [{ payload: '{"event":"order.created"}', error: 'HTTP 502 from hooks.example.com/x?a=1&b=<2>' }]);
  await enqueue(ODD_QUEUE, '{"event":"order.paid"}');

  await makeSucceeded('reports', 6);
  for (let i = 0; i < 4; i++) await enqueue('reports', JSON.stringify({ report: 'daily', day: i }));
}

// 100k dead letters, through the same Redis Functions the daemon calls,
// pipelined with redis-cli (through HTTP it would take minutes).
function seedLarge(n) {
  const q = 'bulk';
  const base = `${PREFIX}:{${q}}`;
  const resp = (...args) => `*${args.length}\r\n` +
    args.map((a) => { const s = String(a); return `$${Buffer.byteLength(s)}\r\n${s}\r\n`; }).join('');
  const errors = ['upstream 503 from inventory', 'timeout after 10 s', 'schema: missing field "sku"',
    'rate limited (429)', 'connection reset by peer'];
  const file = path.join(TMP, 'large.resp');
  const fd = fs.openSync(file, 'w');
  let buf = resp('FCALL', `${LIBRARY}_register`, 1, `${PREFIX}:queues`, q, -1);
  const flush = () => { fs.writeSync(fd, buf); buf = ''; };
  for (let i = 1; i <= n; i++) {
    buf += resp('FCALL', `${LIBRARY}_enqueue`, 1, base, `{"sku":"A-${i}","qty":${i % 7}}`, 1, 0, '');
    if (buf.length > 1 << 20) flush();
  }
  for (let i = 0; i < n; i += 100) buf += resp('FCALL', `${LIBRARY}_claim`, 1, base, 3600000, 100);
  flush();
  for (let i = 1; i <= n; i++) {
    const err = i === n ? 'needle: the last one' : errors[i % errors.length];
    buf += resp('FCALL', `${LIBRARY}_fail`, 2, base, `${base}:m:${i}`, i, '', err, 0, -1);
    if (buf.length > 1 << 20) flush();
  }
  flush();
  fs.closeSync(fd);
  const r = spawnSync('redis-cli', ['-h', '127.0.0.1', '-p', REDIS_PORT, '--pipe'],
    { input: fs.readFileSync(file), encoding: 'utf8', maxBuffer: 1 << 26, timeout: 300000 });
  fs.unlinkSync(file);
  if (r.status !== 0 || !/errors: 0,/.test(r.stdout)) {
    throw new Error(`redis-cli --pipe: ${r.status} ${(r.stdout || '').slice(-300)} ${(r.stderr || '').slice(-300)}`);
  }
}

// ---------------------------------------------------------------------------
// Browser
// ---------------------------------------------------------------------------
let ctx;
const dialogs = [];       // window.alert/confirm/prompt: none may ever fire
const pageErrors = [];    // uncaught exceptions in the console
const cspErrors = [];     // Content-Security-Policy violations
const methods = new Set(); // HTTP methods the console used on the API

// Every response a page gets from retryd is appended to RETRYD_TEST_EXCHANGES
// (set by scripts/test.sh), one JSON line as tests/e2e_support.h writes them,
// for tests/openapi_check.sh to validate against docs/openapi.json.
const EXCHANGES = env.RETRYD_TEST_EXCHANGES;
const ORIGINS = new Set([BASE, NOREDIS].filter(Boolean).map((u) => new URL(u).origin));
function logExchange(resp) {
  const u = new URL(resp.url());
  if (!EXCHANGES || !ORIGINS.has(u.origin)) return;
  const ctype = resp.headers()['content-type'] || '';
  const write = (body) => {
    const line = { suite: 'ui_test', method: resp.request().method(), path: u.pathname + u.search,
                   status: resp.status(), content_type: ctype };
    if (body !== undefined) line.body = body;
    fs.appendFileSync(EXCHANGES, `${JSON.stringify(line)}\n`);
  };
  if (!/json/.test(ctype)) write();
  else resp.text().then(write, () => {}); // a page closed meanwhile: not logged
}

async function openPage(hash, opts = {}) {
  const page = await ctx.newPage();
  page.on('response', logExchange);
  if (opts.viewport) await page.setViewportSize(opts.viewport);
  const token = opts.token === undefined ? TOKEN : opts.token;
  if (token) {
    await page.addInitScript((t) => { try { sessionStorage.setItem('retryd.token', t); } catch (e) { /* */ } }, token);
  }
  page.on('dialog', (d) => { dialogs.push(d.message()); d.dismiss().catch(() => {}); });
  page.on('pageerror', (e) => pageErrors.push(String(e && e.message)));
  page.on('console', (m) => {
    if (/Content[- ]Security[- ]Policy|Refused to/i.test(m.text())) cspErrors.push(m.text());
  });
  page.on('request', (r) => {
    const u = new URL(r.url());
    if (!u.pathname.startsWith('/ui')) methods.add(r.method());
  });
  await page.goto(`${opts.base || BASE}/ui/${hash ? `#${hash}` : ''}`);
  return page;
}

const hashQueue = (q, params) => `/queues/${encodeURIComponent(q)}${params ? `?${new URLSearchParams(params)}` : ''}`;

/** Waits until the table shows rows loaded for the current URL, not the
 *  previous view's rows before its reload has even started. */
async function waitList(page) {
  await page.waitForFunction(() => {
    const t = document.querySelector('#messages-table');
    return t && !t.hasAttribute('aria-busy') && !t.querySelector('tr.loading') &&
      t.dataset.view === location.hash;
  }, null, { timeout: 30000 });
}
const rowIds = (page) => page.$$eval('#messages-table tbody tr[data-id]', (trs) => trs.map((t) => Number(t.dataset.id)));

async function applyFilter(page, error) {
  await page.fill('#filter-error', error);
  await page.press('#filter-error', 'Enter');
  await page.waitForFunction((e) => location.hash.includes(`error=${encodeURIComponent(e).replace(/%20/g, '+')}`) ||
    new URLSearchParams(location.hash.split('?')[1] || '').get('error') === e, error);
  await waitList(page);
}

async function shot(page, name) {
  await page.screenshot({ path: path.join(SHOTS, name) });
}

/** The open confirmation dialog's text, after waiting for it. */
async function confirmText(page) {
  await page.waitForSelector('#confirm-dialog[open]');
  return page.$eval('#confirm-dialog', (d) => d.innerText);
}
async function waitNoDialog(page) {
  await page.waitForFunction(() => !document.querySelector('dialog[open]'), null, { timeout: 60000 });
}

async function toastText(page, re) {
  await page.waitForFunction((src) => [...document.querySelectorAll('.toast-text')]
    .some((t) => new RegExp(src).test(t.textContent)), re.source, { timeout: 30000 });
}

/** A cell as the console's CSV holds it: formula-like text behind a ' (OWASP). */
const sheetCell = (v) => (/^[=+\-@\t\r]/.test(v) ? `'${v}` : v);

function parseCsv(text) {
  const rows = [];
  let row = [];
  let field = '';
  let i = 0;
  let quoted = false;
  while (i < text.length) {
    const c = text[i];
    if (quoted) {
      if (c === '"' && text[i + 1] === '"') { field += '"'; i += 2; continue; }
      if (c === '"') { quoted = false; i++; continue; }
      field += c; i++; continue;
    }
    if (c === '"' && field === '') { quoted = true; i++; continue; }
    if (c === ',') { row.push(field); field = ''; i++; continue; }
    if (c === '\r' && text[i + 1] === '\n') { row.push(field); rows.push(row); row = []; field = ''; i += 2; continue; }
    if (c === '\n' || c === '\r') throw new Error(`bare line break at ${i} outside quotes`);
    field += c; i++;
  }
  if (field !== '' || row.length) throw new Error('the last row does not end with CRLF');
  return rows;
}

async function downloadCsv(page) {
  const [dl] = await Promise.all([page.waitForEvent('download', { timeout: 60000 }), page.click('#export-csv')]);
  const file = await dl.path();
  check(file, `the download failed: ${await dl.failure()}`);
  check(/\.csv$/.test(dl.suggestedFilename()), `file name ${dl.suggestedFilename()} ends in .csv`);
  return parseCsv(fs.readFileSync(file, 'utf8'));
}

// ---------------------------------------------------------------------------
// Tests (they run in this order and share the seeded data)
// ---------------------------------------------------------------------------
const tests = [];
const test = (name, fn) => tests.push({ name, fn });

test('ui_served_with_csp', async () => {
  const r = await http('GET', '/ui', undefined, { token: '' });
  eq(r.status, 301, '/ui redirects');
  eq(r.headers.get('location'), '/ui/', 'to /ui/');
  const page = await http('GET', '/ui/', undefined, { token: '' });
  eq(page.status, 200, '/ui/ is public');
  check(/text\/html/.test(page.headers.get('content-type')), 'index.html is text/html');
  const csp = page.headers.get('content-security-policy') || '';
  check(/script-src 'self'/.test(csp) && !/unsafe-inline|unsafe-eval/.test(csp), `CSP forbids inline script: ${csp}`);
  check(/style-src 'self'/.test(csp), 'CSP forbids inline style');
  check(!/<script>[^<]/.test(page.text) && !/\sstyle=|<style|\son[a-z]+=/i.test(page.text),
        'index.html has no inline script, style or handler');
  for (const f of ['app.js', 'groups.js', 'roles.js', 'app.css', 'favicon.svg']) {
    eq((await http('GET', `/ui/${f}`, undefined, { token: '' })).status, 200, `/ui/${f} is served`);
  }
  for (const f of ['app.js', 'groups.js', 'roles.js']) {
    const js = (await http('GET', `/ui/${f}`, undefined, { token: '' })).text
      .replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, ''); // comments may name them
    check(!/innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(|new Function/.test(js),
          `${f} never parses HTML or code from strings`);
  }
  eq((await http('GET', '/queues', undefined, { token: '' })).status, 401, 'the API refuses without the token');
});

test('token_prompt_without_token', async () => {
  const page = await openPage('/queues', { token: '' });
  await page.waitForSelector('#login-form');
  eq(await page.$('#queues-table'), null, 'no queue table before the token');
  const body = await page.innerText('body');
  check(!body.includes('emails') && !body.includes('billing'), 'no queue names before the token');
  await page.fill('#token-input', 'wrong-token');
  await page.press('#token-input', 'Enter');
  await page.waitForFunction(() => {
    const e = document.querySelector('#token-error');
    return e && !e.hidden && /refused/.test(e.textContent);
  });
  eq(await page.$('#queues-table tbody tr[data-queue]'), null, 'a wrong token shows no data');
  await page.fill('#token-input', TOKEN);
  await page.press('#token-input', 'Enter');
  await page.waitForSelector('#queues-table tbody tr[data-queue="emails"]');
  eq(await page.evaluate(() => sessionStorage.getItem('retryd.token')), TOKEN, 'the token is kept in sessionStorage');
  check(await page.isVisible('#sign-out'), 'a sign-out button');
  await page.click('#sign-out');
  await page.waitForSelector('#login-form');
  eq(await page.evaluate(() => sessionStorage.getItem('retryd.token')), null, 'sign-out forgets the token');
  await page.close();
});

test('overview_counts_top_errors_refresh', async () => {
  const page = await openPage('/queues');
  await page.waitForSelector('#queues-table tbody tr[data-queue="emails"]');
  await page.waitForFunction(() => document.querySelectorAll('#errors-table tbody tr td.error-cell').length > 0);
  const api = (await ok('GET', '/queues')).queues;
  for (const q of api) {
    const cells = await page.$$eval(`#queues-table tbody tr`, (trs, name) => {
      const tr = trs.find((t) => t.dataset.queue === name);
      return tr ? [...tr.querySelectorAll('td.num')].map((td) => td.textContent.replace(/,/g, '')) : null;
    }, q.name);
    check(cells, `a row for queue ${q.name}`);
    eq(cells.slice(0, 5).map(Number), [q.counts.pending, q.counts.processing, q.counts.succeeded, q.counts.dead,
      q.dead_last_24h], `counts of ${q.name}`);
  }
  const names = await page.$$eval('#queues-table tbody th.queue-name', (ths) => ths.map((t) => t.textContent));
  check(names.includes(ODD_QUEUE), 'an odd queue name shows literally');
  const errors = await page.$$eval('#errors-table td.error-cell', (tds) => tds.map((t) => t.textContent));
  check(errors.includes('smtp: connection refused (mx1.example.com:25)'), `top errors list the commonest: ${errors}`);
  const deadCard = await page.textContent('.card-dead .card-value');
  eq(Number(deadCard.replace(/,/g, '')), api.reduce((s, q) => s + q.counts.dead, 0), 'the dead total');
  await shot(page, 'overview.png');

  // Auto-refresh updates the same row in place (no re-render, no flicker).
  await page.$eval('#queues-table tr[data-queue="reports"]', (tr) => { tr.dataset.mark = 'same-node'; });
  const before = (await ok('GET', '/queues')).queues.find((q) => q.name === 'reports').counts.pending;
  await enqueue('reports', JSON.stringify({ report: 'weekly' }));
  await page.waitForFunction((n) => {
    const tr = document.querySelector('#queues-table tr[data-queue="reports"]');
    return tr && tr.querySelector('td.num').textContent === String(n);
  }, before + 1, { timeout: 12000 });
  eq(await page.$eval('#queues-table tr[data-queue="reports"]', (tr) => tr.dataset.mark), 'same-node',
     'the refreshed row is the same element');
  await page.close();
});

// ---------------------------------------------------------------------------
// Throughput charts: what is drawn is what the API's series say
// ---------------------------------------------------------------------------
const SERIES = ['enqueued', 'succeeded', 'failed', 'dead', 'replayed'];

/** The drawn series of a chart: start, step (s), resolution and the values
 *  of each line (data-values), with every point checked against its line. */
async function drawnSeries(page, sel) {
  return page.$eval(sel, (svgEl, names) => {
    const out = { start: Number(svgEl.dataset.start), step: Number(svgEl.dataset.step),
                  resolution: svgEl.dataset.resolution, queues: svgEl.dataset.queues, bad: [] };
    for (const n of names) {
      const g = svgEl.querySelector(`g[data-series="${n}"]`);
      out[n] = g ? g.dataset.values.split(',').map(Number) : null;
      if (!g) continue;
      for (const c of g.querySelectorAll('circle.series-point')) {
        const i = Math.round((Number(c.dataset.t) - out.start) / (out.step * 1000));
        if (out[n][i] !== Number(c.dataset.value) || !c.querySelector('title') ||
            !c.querySelector('title').textContent.endsWith(`: ${Number(c.dataset.value).toLocaleString('en-US')}`)) {
          out.bad.push(`${n}[${i}]`);
        }
      }
      const points = g.querySelectorAll('circle.series-point').length;
      if (points !== out[n].filter((v) => v > 0).length) out.bad.push(`${n}: ${points} points`);
    }
    return out;
  }, SERIES);
}

/** The drawn and the API's series agree on every bucket both cover (a minute
 *  may have begun between the two reads: the later one starts a bucket on). */
function sameSeries(drawn, api, what) {
  eq(drawn.bad, [], `${what}: every point is on its line with its value in a <title>`);
  eq(drawn.resolution, api.resolution, `${what}: resolution`);
  eq(drawn.step, api.step_seconds, `${what}: step`);
  const step = api.step_seconds * 1000;
  const shift = Math.round((api.start - drawn.start) / step);
  check(shift === 0 || shift === 1, `${what}: the API's series starts at ${api.start}, the chart's at ${drawn.start}`);
  for (const n of SERIES) {
    eq(drawn[n].length, api[n].length, `${what}: ${n} buckets`);
    eq(drawn[n].slice(shift), api[n].slice(0, api[n].length - shift), `${what}: ${n}`);
  }
}

function addSeries(list) {
  const start = Math.max(...list.map((x) => x.start));
  const step = list[0].step_seconds * 1000;
  const out = { resolution: list[0].resolution, start, step_seconds: list[0].step_seconds };
  for (const n of SERIES) {
    out[n] = new Array(list[0][n].length).fill(0);
    for (const x of list) {
      const shift = Math.round((start - x.start) / step);
      for (let i = 0; i < out[n].length; i++) out[n][i] += x[n][i + shift] || 0;
    }
  }
  return out;
}

test('throughput_charts_match_api', async () => {
  const q = 'charts';
  for (let i = 0; i < 4; i++) await enqueue(q, JSON.stringify({ chart: i }), { max_retries: 1 });
  const msgs = await claimAll(q, 4);
  eq(msgs.length, 4, 'claimed 4');
  for (const m of msgs.slice(0, 2)) await ok('POST', `${qp(q)}/messages/${m.id}/succeed`, {});
  for (const m of msgs.slice(2)) await ok('POST', `${qp(q)}/messages/${m.id}/fail`, { error: 'chart failure' });
  await ok('POST', `${qp(q)}/messages/${msgs[2].id}/replay`);

  const page = await openPage(hashQueue(q, { status: 'dead' }));
  const sel = '#queue-chart svg.chart-svg';
  await page.waitForSelector(`${sel}[data-start]`);
  let drawn = await drawnSeries(page, sel);
  let api = (await ok('GET', `${qp(q)}/stats?series=minute`)).series;
  sameSeries(drawn, api, 'queue chart, minutes');
  eq(SERIES.map((n) => drawn[n].reduce((a, b) => a + b, 0)), [4, 2, 2, 2, 1], 'the workload in the chart');
  await shot(page, 'queue-chart.png');

  await page.click('#queue-chart button[data-resolution="hour"]');
  await page.waitForSelector(`${sel}[data-resolution="hour"]`);
  drawn = await drawnSeries(page, sel);
  api = (await ok('GET', `${qp(q)}/stats?series=hour`)).series;
  sameSeries(drawn, api, 'queue chart, hours');
  eq(drawn.enqueued.length, 192, '8 days of hours');
  await page.close();

  // The overview adds up the busiest queues' series.
  const over = await openPage('/queues');
  const osel = '#overview-chart svg.chart-svg';
  await over.waitForSelector(`${osel}[data-start]`);
  drawn = await drawnSeries(over, osel);
  const names = JSON.parse(drawn.queues);
  check(names.length > 0 && names.length <= 10, `the overview adds up 1 to 10 queues: ${names}`);
  const all = [];
  for (const n of names) all.push((await ok('GET', `${qp(n)}/stats?series=minute`)).series);
  sameSeries(drawn, addSeries(all), 'overview chart');
  await shot(over, 'overview-chart.png');
  await over.close();

  // On a phone the chart scales down with the page.
  const phone = await openPage(hashQueue(q, { status: 'dead' }), { viewport: { width: 390, height: 844 } });
  await phone.waitForSelector(`${sel}[data-start]`);
  const box = await phone.$eval(sel, (e) => { const r = e.getBoundingClientRect(); return { w: r.width, h: r.height }; });
  check(box.w <= 390 && box.w > 300 && box.h > 80, `the chart fits 390 px and stays readable: ${JSON.stringify(box)}`);
  const o = await phone.evaluate(() => ({ doc: document.documentElement.scrollWidth, view: window.innerWidth }));
  check(o.doc <= o.view, `no horizontal scroll with the chart: ${JSON.stringify(o)}`);
  await phone.close();
});

test('filter_dead_by_error_text', async () => {
  const page = await openPage(hashQueue('emails', { status: 'dead' }));
  await waitList(page);
  const dead = await listAll('emails', 'dead');
  eq((await rowIds(page)).sort((a, b) => a - b), dead.map((m) => m.id).sort((a, b) => a - b), 'every dead letter listed');
  await page.waitForSelector('#queue-top-errors:not([hidden]) .chip');
  await shot(page, 'dead-letters.png');
  await applyFilter(page, 'smtp');
  const ids = await rowIds(page);
  eq(ids.sort((a, b) => a - b), [...seed.emailsDead.smtp, ...seed.emailsDead.unknown], 'only errors containing "smtp"');
  const texts = await page.$$eval('#messages-table .last-error', (s) => s.map((x) => x.textContent));
  check(texts.every((t) => t.includes('smtp')), 'every shown error contains smtp');
  await applyFilter(page, 'no such error text');
  eq(await rowIds(page), [], 'nothing matches');
  check(/No dead letters match/.test(await page.textContent('#list-status')), 'the status says nothing matched');
  await page.close();
});

test('filter_by_time_range', async () => {
  const page = await openPage(hashQueue('billing', { status: 'dead' }));
  await waitList(page);
  eq((await rowIds(page)).length, 5, 'billing has 5 dead letters');
  const local = await page.evaluate((iso) => {
    const d = new Date(iso);
    const p = (n) => String(n).padStart(2, '0');
    // Chromium reports a datetime-local whose seconds are 0 without them, and
    // Playwright's fill refuses a value the input reports differently.
    const secs = d.getSeconds() ? `:${p(d.getSeconds())}` : '';
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())}T${p(d.getHours())}:${p(d.getMinutes())}${secs}`;
  }, seed.T);
  await page.fill('#filter-since', local);
  await page.click('#filter-apply');
  await page.waitForFunction(() => location.hash.includes('since='));
  await waitList(page);
  eq((await rowIds(page)).sort((a, b) => a - b), seed.billingRecent, 'only letters updated since T');
  eq(new URLSearchParams((await page.evaluate(() => location.hash)).split('?')[1]).get('since'), seed.T,
     'the hash holds the bound in UTC');
  await page.fill('#filter-since', '');
  await page.fill('#filter-until', local);
  await page.click('#filter-apply');
  await page.waitForFunction(() => location.hash.includes('until=') && !location.hash.includes('since='));
  await waitList(page);
  eq((await rowIds(page)).length, 2, 'only letters updated until T');
  await page.close();
});

test('xss_payload_shows_literally', async () => {
  const before = dialogs.length;
  const page = await openPage(hashQueue('emails', { status: 'dead' }));
  await waitList(page);
  const err = await page.$eval(`#messages-table tr[data-id="${seed.xssId}"] .last-error`, (e) => e.textContent);
  eq(err, XSS, 'the error shows literally in the list');
  const payload = await page.$eval(`#messages-table tr[data-id="${seed.xssId}"] .payload`, (e) => e.textContent);
  eq(payload, XSS, 'the payload shows literally in the list');
  await page.goto(`${BASE}/ui/#/queues/emails/messages/${seed.xssId}`);
  await page.waitForSelector('#payload');
  eq(await page.textContent('#payload'), XSS, 'the payload shows literally on the message page');
  eq(await page.textContent('#last-error'), XSS, 'the last error shows literally on the message page');
  check(!(await page.isEnabled('text=Formatted')), 'a non-JSON payload has no formatted view');
  // The odd queue name, in every place it appears.
  await page.goto(`${BASE}/ui/#${hashQueue(ODD_QUEUE, { status: 'dead' })}`);
  await waitList(page);
  eq(await page.textContent('.page-head h1 span:last-child'), ODD_QUEUE, 'the queue name shows literally');
  eq((await rowIds(page)).length, 1, 'its dead letter is listed (the name is encoded in paths)');
  await page.goto(`${BASE}/ui/#/queues`);
  await page.waitForSelector('#queues-table tbody tr[data-queue]');
  await sleep(500);
  eq(await page.evaluate(() => [...document.scripts].map((s) => s.getAttribute('src'))), ['roles.js', 'groups.js', 'app.js'],
     'no script element was added (the page\'s own three)');
  eq(await page.evaluate(() => document.querySelectorAll('img:not(.brand img)').length), 0, 'no img element was added');
  eq(dialogs.length - before, 0, 'no dialog fired');
  await page.close();
});

test('message_detail_pretty_json_local_time', async () => {
  const page = await openPage(`/queues/emails/messages/${seed.welcomeId}`);
  await page.waitForSelector('#payload');
  eq(await page.textContent('#payload'), JSON.stringify(JSON.parse(WELCOME_PAYLOAD), null, 2), 'JSON pretty-printed');
  await page.click('text=Raw');
  eq(await page.textContent('#payload'), WELCOME_PAYLOAD, 'the raw payload on demand');
  await page.click('text=Formatted');
  const m = (await getMsg('emails', seed.welcomeId)).json;
  const times = await page.$$eval('time', (ts) => ts.map((t) => [t.getAttribute('datetime'), t.title, t.textContent]));
  const created = times.find((t) => t[0] === m.created_at);
  check(created, 'created_at is shown');
  check(created[1].includes(m.created_at) && /UTC/.test(created[1]), 'UTC on hover');
  const local = await page.evaluate((iso) => {
    const d = new Date(iso);
    const p = (n) => String(n).padStart(2, '0');
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  }, m.created_at);
  eq(created[2], local, 'shown in local time');
  const text = await page.innerText('main');
  check(text.includes('1 of 1') && text.includes('Retry budget'), 'retry count and budget section');
  check(await page.isVisible('#msg-replay'), 'a dead letter offers Replay');
  await shot(page, 'message.png');
  await page.close();
});

// docs/reference.md "Priority": the message page shows a message's priority and expires_at.
test('message_shows_priority_and_expiry', async () => {
  const q = 'prio-ui';
  const hi = (await ok('POST', `${qp(q)}/messages`, { payload: 'hi', priority: 7, ttl_seconds: 3600 })).id;
  const lo = (await ok('POST', `${qp(q)}/messages`, { payload: 'lo' })).id;
  const m = (await getMsg(q, hi)).json;
  let page = await openPage(`/queues/${q}/messages/${hi}`);
  await page.waitForSelector('#msg-priority');
  eq(await page.textContent('#msg-priority'), '7', 'the priority');
  eq(await page.getAttribute('#msg-expires time', 'datetime'), m.expires_at, 'expires_at as a time');
  await page.close();
  page = await openPage(`/queues/${q}/messages/${lo}`);
  await page.waitForSelector('#msg-priority');
  eq(await page.textContent('#msg-priority'), '0', 'priority 0 by default');
  eq(await page.textContent('#msg-expires'), 'never', 'no expiry');
  await page.close();
});

// docs/reference.md "History": the message page draws the history as a timeline, oldest first:
// each failure with its attempt, worker and error, and the replay and snooze marks.
test('message_timeline_shows_failures_in_order', async () => {
  const q = 'timeline';
  const { id } = await enqueue(q, 'tl', { max_retries: 2 });
  let r = await ok('POST', `${qp(q)}/claim`, { worker: 'ui-worker/1' });
  eq(r.worker, 'ui-worker/1', 'the claim shows its worker');
  await ok('POST', `${qp(q)}/messages/${id}/fail`, { error: 'first failure', retry_after_seconds: 0 });
  r = await ok('POST', `${qp(q)}/claim`, { worker: 'ui-worker/2' });
  eq(r.id, id, 'claimed again');
  await ok('POST', `${qp(q)}/messages/${id}/snooze`, { delay_seconds: 0 });
  r = await ok('POST', `${qp(q)}/claim`, { worker: 'ui-worker/2' });
  eq(r.id, id, 'claimed again after the snooze');
  await ok('POST', `${qp(q)}/messages/${id}/fail`, { error: 'second failure' });
  await ok('POST', `${qp(q)}/messages/${id}/replay`, {});
  r = await ok('POST', `${qp(q)}/claim`, {});
  await ok('POST', `${qp(q)}/messages/${id}/fail`, { error: 'third failure', retryable: false });
  const page = await openPage(`/queues/${q}/messages/${id}`);
  await page.waitForSelector('#history-timeline');
  const items = await page.$$eval('#history-timeline > li', (lis) => lis.map((li) => ({
    cls: li.className, text: li.innerText,
    at: li.querySelector('time') && li.querySelector('time').getAttribute('datetime'),
  })));
  eq(items.length, 5, 'three failures, one snooze and one replay');
  eq(items.map((i) => i.cls), ['tl-item tl-failed', 'tl-item tl-snoozed', 'tl-item tl-failed', 'tl-item tl-replayed',
    'tl-item tl-failed'], 'in the order they happened');
  check(items[0].text.includes('Attempt 1 failed') && items[0].text.includes('worker ui-worker/1') &&
        items[0].text.includes('first failure'), `first item: ${items[0].text}`);
  check(items[1].text.includes('Snoozed') && items[1].text.includes('until') && !items[1].text.includes('failed'),
    `second item: ${items[1].text}`);
  check(items[2].text.includes('Attempt 2 failed') && items[2].text.includes('worker ui-worker/2') &&
        items[2].text.includes('second failure'), `third item: ${items[2].text}`);
  check(items[3].text.includes('Replayed'), `fourth item: ${items[3].text}`);
  check(items[4].text.includes('Attempt 1 failed') && !items[4].text.includes('worker') &&
        items[4].text.includes('third failure'), `fifth item: ${items[4].text}`);
  const m = (await getMsg(q, id)).json;
  eq(items.map((i) => i.at), m.history.map((e) => e.at || e.replayed_at || e.snoozed_at),
    'each item at its record\'s time');
  check(items.every((i, k) => k === 0 || i.at >= items[k - 1].at), 'times ascend');
  await page.close();
});

test('policy_shown_and_pause_resume', async () => {
  const q = `flow-${Date.now()}`;
  await enqueue(q, 'one');
  await ok('PUT', `${qp(q)}/policy`, { max_in_flight: 3, rate_limit: { per_second: 2, burst: 4 },
                                       backoff: { jitter: 'full' } });
  const page = await openPage(hashQueue(q));
  await waitList(page);
  await page.waitForFunction(() => !document.querySelector('#pause-toggle').disabled);
  eq(await page.textContent('#pause-state'), 'Running', 'the queue runs');
  const text = await page.textContent('#policy-text');
  check(/at most 3 in flight/.test(text), `the cap is shown: ${text}`);
  check(/2\/s \(burst 4\)/.test(text), `the rate is shown: ${text}`);
  check(/full jitter/.test(text), `the jitter is shown: ${text}`);
  eq(await page.textContent('#pause-toggle'), 'Pause', 'the button pauses');
  await page.click('#pause-toggle');
  check(/Workers lease nothing/.test(await confirmText(page)), 'a pause asks first');
  await page.click('#confirm-cancel');
  await waitNoDialog(page);
  eq((await http('GET', `${qp(q)}/policy`)).json.paused, false, 'Cancel leaves it running');
  await page.click('#pause-toggle');
  await confirmText(page);
  await page.click('#confirm-ok');
  await waitNoDialog(page);
  await toastText(page, /paused/);
  await page.waitForFunction(() => document.querySelector('#pause-state').textContent === 'Paused');
  eq((await http('GET', `${qp(q)}/policy`)).json.paused, true, 'the queue is paused');
  eq((await http('POST', `${qp(q)}/claim`)).status, 204, 'a paused queue leases nothing');
  eq(await page.textContent('#pause-toggle'), 'Resume', 'the button resumes');
  await page.click('#pause-toggle');
  await toastText(page, /resumed/);
  await page.waitForFunction(() => document.querySelector('#pause-state').textContent === 'Running');
  eq((await http('GET', `${qp(q)}/policy`)).json.paused, false, 'resumed');
  eq((await http('POST', `${qp(q)}/claim`)).status, 200, 'claims lease again');
  await page.close();
});

// An SQS queue (policy sqs: true, docs/sqs.md): marked in the list and on its page, which
// shows its RedrivePolicy as SQS does (deadLetterTargetArn, maxReceiveCount).
test('sqs_queue_marked_with_redrive_policy', async () => {
  const q = `sqsq-${Date.now()}`, plain = `plain-${Date.now()}`, dlq = `${q}-dlq`;
  await ok('PUT', `${qp(q)}/policy`, { sqs: true, max_retries: 4, dead_letter_queue: dlq,
                                       lease_expiry: 'redeliver' });
  await enqueue(q, 'one');
  await enqueue(plain, 'two');
  const page = await openPage('/queues');
  await page.waitForSelector(`#queues-table tbody tr[data-queue="${q}"]`);
  await page.waitForSelector(`#queues-table tbody tr[data-queue="${plain}"]`);
  const mark = (name) => page.$eval(`#queues-table tr[data-queue="${name}"] th.queue-name`, (th) => {
    const m = th.querySelector('.sqs-mark');
    return { shown: !!m && !m.hidden && m.offsetWidth > 0, text: m ? m.textContent : null,
             name: th.querySelector('a').textContent };
  });
  const sq = await mark(q), pl = await mark(plain);
  check(sq.shown && sq.text === 'SQS', `the SQS queue is marked: ${JSON.stringify(sq)}`);
  check(!pl.shown && pl.text === '', `a queue of the HTTP API is not: ${JSON.stringify(pl)}`);
  eq(sq.name, q, 'the name stays the name');
  await page.goto(`${BASE}/ui/#${hashQueue(q)}`);
  await waitList(page);
  await page.waitForFunction(() => !document.querySelector('#pause-toggle').disabled);
  check(await page.isVisible('#queue-sqs-mark'), 'the queue page marks it');
  eq(await page.textContent('#queue-sqs-mark'), 'SQS', 'the mark reads SQS');
  check(await page.isVisible('#queue-sqs'), 'the redrive policy is shown');
  eq(await page.textContent('#sqs-redrive'), `dead-letter queue ${dlq} · maxReceiveCount 4`,
     'deadLetterTargetArn and maxReceiveCount are the policy\'s dead_letter_queue and max_retries');
  await shot(page, 'sqs-queue.png');
  // Without a dead-letter queue: no RedrivePolicy, received until retention ends them.
  await ok('PATCH', `${qp(q)}/policy`, { dead_letter_queue: null, max_retries: 'unlimited' });
  await page.reload();
  await waitList(page);
  await page.waitForFunction(() => /none/.test(document.querySelector('#sqs-redrive').textContent));
  check(/until retention ends them/.test(await page.textContent('#sqs-redrive')), 'no redrive policy');
  await page.goto(`${BASE}/ui/#${hashQueue(plain)}`);
  await waitList(page);
  await page.waitForFunction(() => !document.querySelector('#pause-toggle').disabled);
  check(await page.isHidden('#queue-sqs-mark'), 'a plain queue\'s page has no mark');
  check(await page.isHidden('#queue-sqs'), 'nor an SQS redrive policy');
  await page.close();
});

test('dead_letter_rules_in_policy_view', async () => {
  const q = `rules-${Date.now()}`;
  await ok('PUT', `${qp(q)}/policy`, { max_retries: 1, dead_letter_rules: [
    { error_contains: '429', action: 'retry', delay_seconds: 300, max_times: 5 },
    { error_prefix: 'fatal', action: 'dead' }] });
  await enqueue(q, 'one');
  const m = (await http('POST', `${qp(q)}/claim`)).json;
  await ok('POST', `${qp(q)}/messages/${m.id}/fail`, { error: 'HTTP 429' });
  const page = await openPage(hashQueue(q));
  await waitList(page);
  await page.waitForFunction(() => /1 retried/.test(
    (document.querySelector('#policy-rule-0') || {}).textContent || ''));
  const first = await page.textContent('#policy-rule-0');
  check(/error contains “429” → retry after 300 s, at most 5× per message/.test(first),
        `the retry rule is shown: ${first}`);
  const second = await page.textContent('#policy-rule-1');
  check(/error starts with “fatal” → dead at once · 0 retried · 0 dead/.test(second),
        `the dead rule is shown: ${second}`);
  await shot(page, 'policy-rules.png');
  await ok('PUT', `${qp(q)}/policy`, {});
  await page.reload();
  await waitList(page);
  await page.waitForFunction(() => !document.querySelector('#pause-toggle').disabled);
  check(await page.isHidden('#policy-rules'), 'no rules, no list');
  await page.close();
});

// The console shows only what the token may do (ui/roles.js): a reader sees
// the dead letters but no replay, kill, delete, export or policy buttons;
// the admin token sees them on the same page.
const OPERATOR_ACTIONS = ['#replay-selected', '#kill-selected', '#delete-selected', '#replay-all',
  '#export-csv', 'button.replay-one', '#pause-toggle', '#dlq-save'];
async function visibleActions(page) {
  const shown = [];
  for (const sel of OPERATOR_ACTIONS) {
    for (const el of await page.$$(sel)) if (await el.isVisible()) { shown.push(sel); break; }
  }
  return shown;
}
test('reader_token_sees_no_replay_button', async () => {
  const who = await http('GET', '/auth/whoami', undefined, { token: READER_TOKEN });
  eq(who.json && who.json.roles, ['reader'], 'the reader token is a reader');
  const page = await openPage(hashQueue('emails', { status: 'dead' }), { token: READER_TOKEN });
  await waitList(page);
  await page.waitForFunction(() => document.documentElement.dataset.mayOperate === 'no');
  check((await rowIds(page)).length > 0, 'the reader sees the dead letters');
  check((await page.$$('#messages-table button.replay-one')).length > 0, 'rows carry a replay button');
  eq(await visibleActions(page), [], 'no operator action is shown to a reader');
  const id = (await rowIds(page))[0];
  await page.close();
  const msg = await openPage(`/queues/emails/messages/${id}`, { token: READER_TOKEN });
  await msg.waitForSelector('#msg-replay', { state: 'attached' });
  check(!(await msg.isVisible('#msg-replay')), 'no replay button on the message page');
  await msg.close();
  // the API refuses it too: the hidden button is not the only guard
  const r = await http('POST', `${qp('emails')}/messages/${id}/replay`, {}, { token: READER_TOKEN });
  eq(r.status, 403, 'a reader replaying gets 403');
  const admin = await openPage(hashQueue('emails', { status: 'dead' }));
  await waitList(admin);
  await admin.waitForFunction(() => document.documentElement.dataset.mayOperate === 'yes');
  const shown = await visibleActions(admin);
  for (const sel of ['#replay-all', 'button.replay-one', '#export-csv']) {
    check(shown.includes(sel), `the admin token sees ${sel}`);
  }
  await admin.close();
});

test('replay_one_leaves_dead_list', async () => {
  const page = await openPage(hashQueue('emails', { status: 'dead', error: 'user unknown' }));
  await waitList(page);
  const [first, second] = seed.emailsDead.unknown;
  eq((await rowIds(page)).sort((a, b) => a - b), [first, second], 'two "user unknown" letters');
  await page.click(`#messages-table tr[data-id="${first}"] button.replay-one`);
  await page.waitForSelector(`#messages-table tr[data-id="${first}"]`, { state: 'detached' });
  eq((await getMsg('emails', first)).json.status, 'pending', 'the replayed message is pending');
  eq((await getMsg('emails', second)).json.status, 'dead', 'the other one is still dead');
  await page.click('#reload-list');
  await waitList(page);
  eq(await rowIds(page), [second], 'after a reload it is still gone');
  await page.close();
});

test('bulk_replay_selected_with_confirmation', async () => {
  const page = await openPage(hashQueue('emails', { status: 'dead', error: 'connection refused' }));
  await waitList(page);
  const ids = (await rowIds(page)).sort((a, b) => a - b);
  eq(ids, seed.emailsDead.smtp, 'four "connection refused" letters');
  const pick = ids.slice(0, 2);
  for (const id of pick) await page.check(`#messages-table tr[data-id="${id}"] .row-check`);
  eq(await page.textContent('#replay-selected'), 'Replay selected (2)', 'the button counts the selection');
  await page.click('#replay-selected');
  check(/2 messages will be replayed/.test(await confirmText(page)), 'the confirmation says 2 messages');
  await page.click('#confirm-cancel');
  await waitNoDialog(page);
  for (const id of pick) eq((await getMsg('emails', id)).json.status, 'dead', 'Cancel changes nothing');
  await page.click('#replay-selected');
  await confirmText(page);
  await page.click('#confirm-ok');
  await waitNoDialog(page);
  await toastText(page, /Replayed 2 messages/);
  await page.waitForFunction((gone) => gone.every((id) => !document.querySelector(`#messages-table tr[data-id="${id}"]`)), pick);
  await waitList(page);
  eq((await rowIds(page)).sort((a, b) => a - b), ids.slice(2), 'the two left the dead list');
  for (const id of pick) eq((await getMsg('emails', id)).json.status, 'pending', `message ${id} is pending`);
  await page.close();
});

test('replay_all_matching_error_text', async () => {
  const page = await openPage(hashQueue('emails', { status: 'dead', error: 'connection refused' }));
  await waitList(page);
  const left = (await rowIds(page)).sort((a, b) => a - b);
  eq(left.length, 2, 'two "connection refused" letters left');
  const requests = [];
  page.on('request', (r) => { if (r.method() === 'POST') requests.push(r.postData()); });
  await page.click('#replay-all');
  const text = await confirmText(page);
  check(/2 messages will be replayed/.test(text), `the confirmation counts the matches: ${text}`);
  check(text.includes('connection refused'), 'and names the filter');
  await page.click('#confirm-ok');
  await waitNoDialog(page);
  await toastText(page, /Replayed 2 messages/);
  await waitList(page);
  eq(await rowIds(page), [], 'no match left');
  eq(requests.map((b) => JSON.parse(b)), [{ error_contains: 'connection refused' }], 'one POST {error_contains}');
  for (const id of left) eq((await getMsg('emails', id)).json.status, 'pending', `message ${id} is pending`);
  await page.close();
});

test('replay_all_matching_time_range', async () => {
  const page = await openPage(hashQueue('billing', { status: 'dead', since: seed.T }));
  await waitList(page);
  eq((await rowIds(page)).sort((a, b) => a - b), seed.billingRecent, 'three letters since T');
  const requests = [];
  page.on('request', (r) => { if (r.method() === 'POST') requests.push(r.postData()); });
  await page.click('#replay-all');
  check(/3 messages will be replayed/.test(await confirmText(page)), 'the confirmation says 3');
  await page.click('#confirm-ok');
  await waitNoDialog(page);
  await toastText(page, /Replayed 3 messages/);
  eq(requests.map((b) => JSON.parse(b).ids.sort((a, b2) => a - b2)), [seed.billingRecent], 'one POST {ids}');
  const dead = await listAll('billing', 'dead');
  eq(dead.map((m) => m.last_error), ['gateway timeout after 30 s', 'gateway timeout after 30 s'],
     'the older letters stay dead');
  await page.close();
});

test('replay_dialog_redrives_to_another_queue', async () => {
  const src = 'redrive-src';
  const dst = 'redrive-dst';
  const ids = await makeDead(src, [{ payload: 'r1', error: 'moved away' }, { payload: 'r2', error: 'moved away' }]);
  const page = await openPage(hashQueue(src, { status: 'dead' }));
  await waitList(page);
  eq((await rowIds(page)).sort((a, b) => a - b), ids, 'two dead letters');
  const requests = [];
  page.on('request', (r) => { if (r.method() === 'POST') requests.push(r.postData()); });
  await page.click('#replay-all');
  await confirmText(page);
  check(await page.isVisible('#confirm-target'), 'the replay dialog offers a target queue');
  await page.fill('#confirm-target', dst);
  await page.click('#confirm-ok');
  await waitNoDialog(page);
  await toastText(page, /Moved 2 messages to queue/);
  eq(requests.map((b) => JSON.parse(b)), [{ all: true, to: dst }], 'one POST {all, to}');
  await waitList(page);
  eq(await rowIds(page), [], 'none left dead in the source');
  const moved = await listAll(dst, 'pending');
  eq(moved.map((m) => [m.payload, m.origin.queue, m.origin.id]), [['r1', src, ids[0]], ['r2', src, ids[1]]],
     'each once in the target, with its origin');
  await page.goto(`${BASE}/ui/#/queues/${encodeURIComponent(dst)}/messages/${moved[0].id}`);
  await page.waitForSelector('#msg-origin');
  eq(await page.textContent('#msg-origin'), `${src} #${ids[0]}`, 'the message page shows the origin');
  await page.close();
});

test('export_csv_rows', async () => {
  const page = await openPage(hashQueue('emails', { status: 'dead' }));
  await waitList(page);
  const rows = await downloadCsv(page);
  eq(rows[0], ['id', 'queue', 'status', 'retry_count', 'max_retries', 'retry_after', 'last_error',
    'lease_expires_at', 'created_at', 'updated_at', 'payload', 'history_count'], 'the header');
  const dead = await listAll('emails', 'dead');
  eq(rows.length - 1, dead.length, 'one row per dead letter');
  for (const m of dead) {
    const r = rows.find((x) => x[0] === String(m.id));
    check(r, `a row for message ${m.id}`);
    eq(r, [String(m.id), m.queue, m.status, String(m.retry_count), String(m.max_retries), m.retry_after || '',
      m.last_error || '', m.lease_expires_at || '', m.created_at, m.updated_at, m.payload,
      String(m.history.length + m.history_dropped)].map(sheetCell),
    `row of message ${m.id}`);
  }
  eq(rows.find((x) => x[0] === String(seed.csvId))[10], CSV_PAYLOAD, 'quotes, comma and CRLF survive');
  await applyFilter(page, 'quota');
  const filtered = await downloadCsv(page);
  eq(filtered.slice(1).map((r) => [r[0], r[6]]), [[String(seed.csvId), CSV_ERROR]], 'the filtered export');
  await page.close();
});

// CSV injection (OWASP): a cell starting with = + - @ TAB or CR leaves the
// console behind a single quote, quoted, so a spreadsheet shows it as text.
test('export_csv_neutralises_formulas', async () => {
  const items = [
    { payload: '=HYPERLINK("http://evil.example","click")', error: '+cmd|\' /C calc\'!A0' },
    { payload: '-2+3', error: '@SUM(A1)' },
    { payload: '\tlead tab', error: '\rlead cr' },
    { payload: 'a=b', error: 'x-y' },
  ];
  const ids = await makeDead('sheets', items);
  const page = await openPage(hashQueue('sheets', { status: 'dead' }));
  await waitList(page);
  const [dl] = await Promise.all([page.waitForEvent('download', { timeout: 60000 }), page.click('#export-csv')]);
  const text = fs.readFileSync(await dl.path(), 'utf8');
  check(text.includes('"\'=HYPERLINK(""http://evil.example"",""click"")"'), 'the formula payload is quoted behind \'');
  check(text.includes(',a=b,1\r\n'), 'a harmless cell stays as it is (then history_count)');
  const rows = parseCsv(text);
  const want = [
    ["'=HYPERLINK(\"http://evil.example\",\"click\")", "'+cmd|' /C calc'!A0"],
    ["'-2+3", "'@SUM(A1)"],
    ["'\tlead tab", "'\rlead cr"],
    ['a=b', 'x-y'],
  ];
  for (let i = 0; i < ids.length; i++) {
    const r = rows.find((x) => x[0] === String(ids[i]));
    check(r, `a row for message ${ids[i]}`);
    eq([r[10], r[6]], want[i], `payload and last_error of message ${ids[i]}`);
  }
  await page.close();
});

test('kill_and_delete_with_confirmation', async () => {
  const page = await openPage(`/queues/emails/messages/${seed.pendingJsonId}`);
  await page.waitForSelector('#msg-kill');
  await page.click('#msg-kill');
  check(/1 message will be marked dead/.test(await confirmText(page)), 'kill says how many');
  await page.fill('#confirm-reason', 'stuck: killed by the UI test');
  await page.click('#confirm-ok');
  await waitNoDialog(page);
  await page.waitForSelector('#msg-replay');
  const m = (await getMsg('emails', seed.pendingJsonId)).json;
  eq([m.status, m.last_error], ['dead', 'stuck: killed by the UI test'], 'killed with the reason');
  await page.click('#msg-delete');
  check(/1 message will be deleted/.test(await confirmText(page)), 'delete says how many');
  await page.click('#confirm-ok');
  await page.waitForFunction(() => /^#\/queues\/emails\?/.test(location.hash));
  eq((await getMsg('emails', seed.pendingJsonId)).status, 404, 'deleted');

  // Mark many dead at once: every pending message of billing.
  await page.goto(`${BASE}/ui/#${hashQueue('billing', { status: 'pending' })}`);
  await waitList(page);
  const pending = await rowIds(page);
  eq(pending.length, 5, 'billing has 5 pending (2 fresh, 3 replayed)');
  await page.check('#check-all');
  await page.click('#kill-selected');
  check(/5 messages will be marked dead/.test(await confirmText(page)), 'bulk kill says 5');
  await page.click('#confirm-ok');
  await toastText(page, /Killed 5 messages/);
  await waitList(page);
  eq(await rowIds(page), [], 'billing has no pending left');
  eq((await ok('GET', '/queues/billing/stats')).counts.dead, 7, 'all 7 are dead');
  await page.close();
});

test('keyboard_reaches_filter_and_replay', async () => {
  const page = await openPage(hashQueue('emails', { status: 'dead' }));
  await waitList(page);
  await page.evaluate(() => { document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0); });
  const seen = [];
  for (let i = 0; i < 80; i++) {
    await page.keyboard.press('Tab');
    const el = await page.evaluate(() => {
      const a = document.activeElement;
      return a ? `${a.tagName}#${a.id}.${a.className}` : '';
    });
    seen.push(el);
    if (seen.some((s) => s.includes('#filter-error')) && seen.some((s) => s.includes('replay-one'))) break;
  }
  check(seen.some((s) => s.includes('#filter-error')), 'Tab reaches the filter input');
  check(seen.some((s) => s.includes('replay-one')), 'Tab reaches a Replay button');
  const iFilter = seen.findIndex((s) => s.includes('#filter-error'));
  const iReplay = seen.findIndex((s) => s.includes('replay-one'));
  check(iFilter < iReplay, 'the filter comes before the rows');
  // "/" jumps to the filter; a confirmation opens and closes by keyboard.
  await page.evaluate(() => document.activeElement && document.activeElement.blur());
  await page.keyboard.press('/');
  eq(await page.evaluate(() => document.activeElement.id), 'filter-error', '"/" focuses the filter');
  const id = (await rowIds(page))[0];
  await page.focus(`#messages-table tr[data-id="${id}"] .row-check`);
  await page.keyboard.press('Space');
  await page.focus('#replay-selected');
  await page.keyboard.press('Enter');
  await confirmText(page);
  eq(await page.evaluate(() => document.activeElement.id), 'confirm-cancel', 'the dialog focuses Cancel');
  await page.keyboard.press('Escape');
  await waitNoDialog(page);
  eq((await getMsg('emails', id)).json.status, 'dead', 'Escape cancels');
  eq(await page.evaluate(() => document.activeElement.id), 'replay-selected', 'focus returns to the button');
  await page.close();
});

test('phone_390_no_horizontal_scroll', async () => {
  const viewport = { width: 390, height: 844 };
  const page = await openPage('/queues', { viewport });
  await page.waitForSelector('#queues-table tbody tr[data-queue]');
  const overflow = () => page.evaluate(() => ({
    doc: document.documentElement.scrollWidth, body: document.body.scrollWidth, view: window.innerWidth,
  }));
  let o = await overflow();
  check(o.doc <= o.view && o.body <= o.view, `overview fits 390 px: ${JSON.stringify(o)}`);
  await page.goto(`${BASE}/ui/#${hashQueue('emails', { status: 'dead' })}`);
  await waitList(page);
  o = await overflow();
  check(o.doc <= o.view && o.body <= o.view, `dead letters fit 390 px: ${JSON.stringify(o)}`);
  await shot(page, 'phone.png');
  await page.goto(`${BASE}/ui/#/queues/emails/messages/${seed.welcomeId}`);
  await page.waitForSelector('#payload');
  o = await overflow();
  check(o.doc <= o.view && o.body <= o.view, `a message fits 390 px: ${JSON.stringify(o)}`);
  await page.close();
});

test('redis_unavailable_banner', async () => {
  const page = await openPage('/queues', { base: NOREDIS });
  await page.waitForSelector('#banner:not([hidden])', { timeout: 15000 });
  const text = await page.textContent('#banner');
  check(/Redis is unavailable/.test(text), `the banner says Redis is unavailable: ${text}`);
  await page.waitForSelector('#queues-table .empty-row.error');
  check(/Redis is unavailable/.test(await page.textContent('#queues-table')), 'the table says why it is empty');
  await page.goto(`${NOREDIS}/ui/#${hashQueue('emails', { status: 'dead' })}`);
  await page.waitForSelector('#banner:not([hidden])', { timeout: 15000 });
  await page.waitForSelector('#messages-table .empty-row.error');
  await page.close();
});

test('large_queue_pages_quickly', async () => {
  if (!LARGE) { console.log('    skipped: RETRYD_UI_LARGE=0'); return; }
  const stats = await ok('GET', '/queues/bulk/stats');
  eq(stats.counts.dead, LARGE, `${LARGE} dead letters seeded`);
  const page = await openPage('/queues');
  await page.waitForSelector('#queues-table tbody tr[data-queue="bulk"]');
  let t0 = Date.now();
  await page.goto(`${BASE}/ui/#${hashQueue('bulk', { status: 'dead' })}`);
  await waitList(page);
  await page.waitForFunction(() => document.querySelectorAll('#messages-table tr[data-id]').length === 50);
  const first = Date.now() - t0;
  t0 = Date.now();
  await page.click('#next-page');
  await page.waitForFunction(() => /^51–100 of/.test(document.querySelector('#list-status').textContent));
  const next = Date.now() - t0;
  t0 = Date.now();
  await applyFilter(page, 'needle');
  await page.waitForFunction(() => document.querySelectorAll('#messages-table tr[data-id]').length === 1);
  const search = Date.now() - t0;
  t0 = Date.now();
  await page.click('#filter-clear');
  await page.waitForFunction(() => !location.hash.includes('error='));
  await waitList(page);
  const rows = await downloadCsv(page);
  const exported = Date.now() - t0;
  eq(rows.length - 1, LARGE, 'the export has every dead letter');
  eq(new Set(rows.slice(1).map((r) => r[0])).size, LARGE, 'each once');
  console.log(`    ${LARGE} dead: first page ${first} ms, next page ${next} ms, ` +
              `search through all ${search} ms, CSV export of all ${exported} ms`);
  check(first < 3000, `the first page in under 3 s (${first} ms)`);
  check(next < 3000, `the next page in under 3 s (${next} ms)`);
  check(search < 20000, `a search through every letter in under 20 s (${search} ms)`);
  check(exported < 60000, `the export of every letter in under 60 s (${exported} ms)`);
  await page.close();
});

// A top error of 150-200 bytes full of punctuation is more than 255 characters
// once percent-encoded; its filter link got 422 while retryd length-checked the
// encoded query value (issue 19, item 8). It filters like any other.
test('top_error_link_filters_long_punctuated_error', async () => {
  const q = 'gateway-long-errors';
  const long = 'POST https://pay.example.com/v2/charges?id=42&retry=3 -> 502 (Bad Gateway); ' +
    'body={"error":"upstream timeout","ms":30000}; next=#7 & 100% of 5/5 tries + giving up: "réessayer" [déjà vu]';
  check(Buffer.byteLength(long) <= 200, `the error fits top_errors uncut (${Buffer.byteLength(long)} bytes)`);
  const encoded = new URLSearchParams({ e: long }).toString().length - 2;
  check(encoded > 255, `encoded it is longer than 255 characters (${encoded})`);
  const ids = await makeDead(q, [{ payload: 'a', error: long }, { payload: 'b', error: long },
                                 { payload: 'c', error: 'other' }]);
  const page = await openPage(hashQueue(q, { status: 'dead' }));
  await waitList(page);
  await page.waitForSelector('#queue-top-errors:not([hidden]) .chip');
  const index = await page.$$eval('#queue-top-errors .chip', (as, e) => as.findIndex((a) => a.title === e), long);
  check(index >= 0, 'a chip for the long error');
  await (await page.$$('#queue-top-errors .chip'))[index].click();
  await page.waitForFunction((e) => new URLSearchParams(location.hash.split('?')[1] || '').get('error') === e, long);
  await waitList(page);
  eq((await rowIds(page)).sort((a, b) => a - b), ids.slice(0, 2), 'the chip lists the two letters with that error');
  await page.close();
});

test('dead_letter_queue_set_in_policy_view', async () => {
  const q = `dlqv-${Date.now()}`;
  const target = `${q}-dlq`;
  await ok('PUT', `${qp(q)}/policy`, { max_retries: 4 });
  await ok('PUT', `${qp(target)}/policy`, { dead_letter_queue: q });
  await enqueue(q, 'one');
  const page = await openPage(hashQueue(q));
  await waitList(page);
  await page.waitForFunction(() => !document.querySelector('#dlq-save').disabled);
  eq(await page.inputValue('#dlq-input'), '', 'no dead-letter queue yet');
  // The target leads back here: refused, nothing changed.
  await page.fill('#dlq-input', target);
  await page.click('#dlq-save');
  await toastText(page, /cycle/);
  eq((await http('GET', `${qp(q)}/policy`)).json.dead_letter_queue, null, 'a cycle is refused');
  await ok('PATCH', `${qp(target)}/policy`, { dead_letter_queue: null });
  await page.fill('#dlq-input', target);
  await page.click('#dlq-save');
  await toastText(page, /now move to/);
  const pol = (await http('GET', `${qp(q)}/policy`)).json;
  eq(pol.dead_letter_queue, target, 'the dead-letter queue is set');
  eq(pol.max_retries, 4, 'the other fields stay');
  check(/deaths move to/.test(await page.textContent('#policy-text')), 'the strip says where deaths go');
  // A death moves there, and its message names where it came from.
  const m = (await http('POST', `${qp(q)}/claim`)).json;
  await ok('POST', `${qp(q)}/messages/${m.id}/kill`, {});
  let moved = null;
  for (let i = 0; i < 100 && !moved; i++) {
    const l = (await http('GET', `${qp(target)}/messages?status=pending`)).json;
    moved = l.messages[0] || null;
    if (!moved) await new Promise((r) => setTimeout(r, 50));
  }
  check(moved, 'the death moved to the dead-letter queue');
  const detail = await openPage(`/queues/${encodeURIComponent(target)}/messages/${moved.id}`);
  await detail.waitForSelector('#msg-origin');
  eq(await detail.textContent('#msg-origin'), `${q} #${m.id}`, 'the origin is shown');
  await detail.close();
  await page.fill('#dlq-input', '');
  await page.click('#dlq-save');
  await toastText(page, /stay here/);
  eq((await http('GET', `${qp(q)}/policy`)).json.dead_letter_queue, null, 'cleared');
  await page.close();
});

// Fairness groups (docs/reference.md "Fairness groups"): the queue page links
// to its groups once it has any; the groups view shows each group (as text,
// however odd its name) with its counts, paged by the API's cursor.
test('groups_view_pages_with_cursor', async () => {
  const q = `groups-${Date.now()}`;
  const N = 130;   // more than a page of 100
  for (let i = 0; i < N; i++) await enqueue(q, `m${i}`, { group: `g${String(i).padStart(3, '0')}` });
  await enqueue(q, 'second', { group: 'g000' });
  await enqueue(q, 'odd', { group: XSS });
  await enqueue(q, 'plain');
  const claimed = (await http('POST', `${qp(q)}/claim`)).json;
  const page = await openPage(hashQueue(q));
  await page.waitForSelector('#queue-groups-link:not([hidden])');
  eq(await page.textContent('#queue-groups-link'), `${N + 1} fairness groups ›`, 'the link counts the groups');
  await page.click('#queue-groups-link');
  await page.waitForSelector('#groups-table tbody th.group-name');
  const rows = async () => page.$$eval('#groups-table tbody tr', (trs) => trs.map((tr) =>
    [...tr.children].map((c) => c.textContent)));
  let first = await rows();
  eq(first.length, 100, 'a page of 100');
  // The API's own first page, row by row.
  const api = (await ok('GET', `${qp(q)}/groups?limit=100`)).groups;
  eq(first, api.map((g) => [g.group, String(g.pending), String(g.processing)]), 'the rows are the API\'s');
  const g000 = first.find((r) => r[0] === 'g000');
  eq(g000.slice(1), claimed.group === 'g000' ? ['1', '1'] : ['2', '0'], 'g000 has two messages');
  check(await page.isVisible('#groups-next'), 'a next page');
  await page.click('#groups-next');
  await page.waitForFunction(() => document.querySelectorAll('#groups-table tbody th.group-name').length === 31);
  const second = await rows();
  const names = new Set([...first, ...second].map((r) => r[0]));
  eq(names.size, N + 1, 'every group once over the two pages');
  check(names.has(XSS), 'an odd group name shows literally');
  check(await page.isHidden('#groups-next'), 'no page after the last');
  check(/cursor=/.test(await page.evaluate(() => location.hash)), 'the page is a link of its own');
  await page.click('#groups-first');
  await page.waitForFunction(() => document.querySelectorAll('#groups-table tbody th.group-name').length === 100);
  await shot(page, 'groups.png');
  await page.close();
});

test('only_get_post_patch_delete_no_csp_violation', async () => {
  const extra = [...methods].filter((m) => !['GET', 'POST', 'PATCH', 'DELETE'].includes(m));
  eq(extra, [], 'the console used only GET, POST, PATCH and DELETE');
  eq(cspErrors, [], 'no Content-Security-Policy violation');
  eq(pageErrors, [], 'no uncaught exception');
  eq(dialogs, [], 'no alert/confirm/prompt ever fired');
});

// ---------------------------------------------------------------------------
// Runner
// ---------------------------------------------------------------------------
async function main() {
  const only = process.argv.slice(2);
  const run = only.length ? tests.filter((t) => only.includes(t.name)) : tests;
  const failed = [];
  let passed = 0;
  let browserDir = null;
  const t0 = Date.now();
  try {
    await seedData();
    if (LARGE) seedLarge(LARGE);
    console.log(`ui_test.mjs: seeded in ${Date.now() - t0} ms`);
    browserDir = fs.mkdtempSync(path.join(TMP, 'chromium-profile-'));
    ctx = await chromium.launchPersistentContext(browserDir, {
      executablePath: CHROMIUM,
      headless: true,
      args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking',
        '--disable-component-update', '--no-first-run', '--disable-sync'],
      viewport: { width: 1280, height: 800 },
      acceptDownloads: true,
      locale: 'en-GB',
    });
  } catch (e) {
    console.log(`ui_test.mjs: setup failed: ${e && e.stack}`);
    console.log('[  FAILED  ] 1 test(s), listed below:');
    console.log('[  FAILED  ] ui_setup');
    if (ctx) await ctx.close().catch(() => {});
    process.exit(1);
  }
  console.log(`[==========] Running ${run.length} test(s).`);
  for (const t of run) {
    console.log(`[ RUN      ] ${t.name}`);
    const started = Date.now();
    try {
      let timer;
      await Promise.race([t.fn(), new Promise((_, rej) => {
        timer = setTimeout(() => rej(new Error('timed out after 120 s')), 120000);
      })]).finally(() => clearTimeout(timer));
      console.log(`[       OK ] ${t.name} (${Date.now() - started} ms)`);
      passed++;
    } catch (e) {
      const msg = e instanceof CheckError ? e.message : (e && e.stack) || String(e);
      console.log(`    FAIL: ${msg.split('\n').join('\n    ')}`);
      console.log(`[  FAILED  ] ${t.name}`);
      failed.push(t.name);
      for (const p of ctx.pages()) await p.close().catch(() => {});
    }
  }
  await ctx.close().catch(() => {});
  console.log(`[==========] ${run.length} test(s) run.`);
  console.log(`[  PASSED  ] ${passed} test(s).`);
  if (failed.length) {
    console.log(`[  FAILED  ] ${failed.length} test(s), listed below:`);
    for (const n of failed) console.log(`[  FAILED  ] ${n}`);
  }
  process.exit(failed.length ? 1 : 0);
}

main();
