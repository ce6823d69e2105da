/* retryd console: plain JavaScript, no framework, no build step.
 *
 * Served by retryd at /ui/ under a Content-Security-Policy without inline
 * script or style, and driven only through retryd's public HTTP API (the same
 * routes as any client; see README "HTTP API" and docs/console.md).
 *
 * Rules kept throughout:
 *  - every value from the API reaches the page as text (textContent,
 *    createTextNode, setAttribute on title/datetime); never innerHTML;
 *  - changes use POST and DELETE only; reads use GET;
 *  - the bearer token lives in sessionStorage (this tab only) and goes in an
 *    Authorization header; a 401 shows the token prompt and no data;
 *  - styling is by class and the hidden attribute (style-src 'self').
 *
 * Hash routes:
 *   #/queues                                  overview
 *   #/queues/<q>?status=&error=&since=&until=&limit=&cursor=
 *                                             a queue's messages
 *   #/queues/<q>/messages/<id>                one message
 *   #/queues/<q>/groups?cursor=               a queue's fairness groups (groups.js)
 */
'use strict';

(function () {
  const TOKEN_KEY = 'retryd.token';
  const REFRESH_KEY = 'retryd.autoRefresh';
  const REFRESH_MS = 5000;
  const STATES = ['pending', 'processing', 'succeeded', 'dead'];
  const TABS = ['dead', 'pending', 'processing', 'succeeded', 'all'];
  const WHAT = { dead: 'dead letters', pending: 'pending messages', processing: 'processing messages',
                 succeeded: 'succeeded messages', all: 'messages' };
  const PAGE_SIZES = [25, 50, 100, 250, 500, 1000];
  const DEFAULT_LIMIT = 50;
  const SCAN_LIMIT = 1000;          // rows per call when walking a whole listing
  const MAX_CALLS_PER_PAGE = 100;   // a filtered page stops searching after this many calls
  const REPLAY_CHUNK = 1000;        // ids per POST /queues/{q}/replay
  const CONCURRENCY = 4;            // parallel calls for per-message actions
  const OVERVIEW_STATS_QUEUES = 20; // queues whose top errors the overview reads
  const QUEUES_PAGE = 1000;         // GET /queues page size (its maximum)
  const QUEUES_PAGES_MAX = 50;      // pages the overview follows (50,000 queues)
  const NARROW = window.matchMedia('(max-width: 640px)');
  // retryd may sit behind a proxy under a path prefix: the API is beside /ui.
  const API_BASE = location.pathname.replace(/\/ui(\/.*)?$/, '');

  // -------------------------------------------------------------------------
  // DOM helpers
  // -------------------------------------------------------------------------
  const $ = (sel, root) => (root || document).querySelector(sel);

  /** h('tag', {attr: value, onclick: fn, text: 'x'}, child...): children
   *  that are strings or numbers become text nodes. */
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    if (attrs) {
      for (const [k, v] of Object.entries(attrs)) {
        if (v === null || v === undefined || v === false) continue;
        if (k === 'class') el.className = v;
        else if (k === 'text') el.textContent = String(v);
        else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
        else if (k === 'checked' || k === 'disabled' || k === 'hidden' || k === 'value' ||
                 k === 'indeterminate') el[k] = v;
        else el.setAttribute(k, v === true ? '' : String(v));
      }
    }
    appendKids(el, kids);
    return el;
  }

  function appendKids(el, kids) {
    for (const k of kids.flat(Infinity)) {
      if (k === null || k === undefined || k === false) continue;
      el.appendChild(typeof k === 'string' || typeof k === 'number'
        ? document.createTextNode(String(k)) : k);
    }
  }

  function clear(el) {
    while (el.firstChild) el.removeChild(el.firstChild);
    return el;
  }

  /** Sets text only when it changed, so refreshes do not repaint. */
  function setText(el, text) {
    text = String(text);
    if (el.textContent !== text) el.textContent = text;
  }

  function setAttr(el, name, value) {
    if (value === null || value === undefined) {
      if (el.hasAttribute(name)) el.removeAttribute(name);
    } else if (el.getAttribute(name) !== String(value)) {
      el.setAttribute(name, String(value));
    }
  }

  const fmtInt = (n) => (typeof n === 'number' ? n.toLocaleString('en-US') : '–');
  const plural = (n, one, many) => `${fmtInt(n)} ${n === 1 ? one : (many || one + 's')}`;
  const enc = encodeURIComponent;

  function pad(n, w) { return String(n).padStart(w || 2, '0'); }

  /** An RFC 3339 UTC time as local "YYYY-MM-DD HH:MM:SS". */
  function fmtLocal(iso) {
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return String(iso);
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
      `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }

  function fmtRelative(iso) {
    const ms = new Date(iso).getTime() - Date.now();
    if (Number.isNaN(ms)) return '';
    const s = Math.round(Math.abs(ms) / 1000);
    let t;
    if (s < 60) t = `${s} s`;
    else if (s < 3600) t = `${Math.round(s / 60)} min`;
    else if (s < 86400) t = `${Math.round(s / 3600)} h`;
    else t = `${Math.round(s / 86400)} d`;
    return ms < 0 ? `${t} ago` : `in ${t}`;
  }

  /** <time> in the viewer's local time, UTC on hover. */
  function timeEl(iso, relative) {
    if (!iso) return h('span', { class: 'muted', text: '—' });
    const t = h('time', { datetime: iso, title: `${iso} (UTC)` }, fmtLocal(iso));
    if (!relative) return t;
    return h('span', null, t, h('span', { class: 'rel', text: ` (${fmtRelative(iso)})` }));
  }

  /** A local datetime-local value ("YYYY-MM-DDTHH:MM:SS") from an ISO time. */
  function isoToLocalInput(iso) {
    if (!iso) return '';
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return '';
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T` +
      `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }

  function localInputToIso(v) {
    if (!v) return '';
    const d = new Date(v); // a datetime-local value without zone is local time
    return Number.isNaN(d.getTime()) ? null : d.toISOString();
  }

  function utf8Bytes(s) { return new TextEncoder().encode(s).length; }

  function statusPill(status) {
    const s = STATES.includes(status) ? status : 'unknown';
    return h('span', { class: `pill pill-${s}`, text: status || 'unknown' });
  }

  // -------------------------------------------------------------------------
  // Token, API client, errors
  // -------------------------------------------------------------------------
  function getToken() {
    try { return sessionStorage.getItem(TOKEN_KEY) || ''; } catch (e) { return ''; }
  }
  function setToken(t) {
    try {
      if (t) sessionStorage.setItem(TOKEN_KEY, t); else sessionStorage.removeItem(TOKEN_KEY);
    } catch (e) { /* storage disabled: the token lives until reload */ }
    $('#sign-out').hidden = !t;
  }

  class ApiError extends Error {
    constructor(status, problem) {
      super((problem && (problem.detail || problem.title)) || `HTTP ${status}`);
      this.name = 'ApiError';
      this.status = status;
      this.problem = problem || {};
    }
    get type() { return String(this.problem.type || ''); }
    get isBackendDown() { return this.status === 503 && this.type.endsWith('/backend-unavailable'); }
    get isNetwork() { return this.status === 0; }
  }

  let inflight = 0;
  function busy(delta) {
    inflight = Math.max(0, inflight + delta);
    $('#loading-bar').hidden = inflight === 0;
    document.body.classList.toggle('is-busy', inflight > 0);
  }

  /** One API call. Resolves to the parsed JSON (null for 204); rejects with
   *  ApiError (status 0 when retryd could not be reached) or AbortError. */
  async function api(method, path, body, opts) {
    const headers = { Accept: 'application/json' };
    const token = getToken();
    if (token) headers.Authorization = `Bearer ${token}`;
    const init = { method, headers, cache: 'no-store', credentials: 'omit',
                   signal: opts && opts.signal };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    busy(+1);
    try {
      let res;
      try {
        res = await fetch(API_BASE + path, init);
      } catch (e) {
        if (e && e.name === 'AbortError') throw e;
        throw new ApiError(0, { title: 'retryd is unreachable',
                                detail: 'The console could not connect to retryd.' });
      }
      const text = await res.text();
      let data = null;
      if (text) { try { data = JSON.parse(text); } catch (e) { data = null; } }
      if (!res.ok) {
        throw new ApiError(res.status, data && typeof data === 'object'
          ? data : { title: `${res.status} ${res.statusText}` });
      }
      connectionOk();
      return data;
    } finally {
      busy(-1);
    }
  }

  const queuePath = (q) => `/queues/${enc(q)}`;
  const messagePath = (q, id) => `${queuePath(q)}/messages/${enc(id)}`;

  function problemText(err) {
    if (!(err instanceof ApiError)) return String(err && err.message || err);
    const p = err.problem;
    let t = p.title || `HTTP ${err.status}`;
    if (p.detail) t += `: ${p.detail}`;
    if (Array.isArray(p.errors) && p.errors.length) {
      t += ` (${p.errors.map((e) => e && e.message).filter(Boolean).join(' ')})`;
    }
    return t;
  }

  /** Shows what went wrong where the user will see it. 401 → token prompt;
   *  Redis down / retryd unreachable → the banner; anything else → a toast. */
  function handleError(err) {
    if (err && err.name === 'AbortError') return;
    if (!(err instanceof ApiError)) {
      console.error(err); // eslint-disable-line no-console
      toast(`Unexpected error: ${err && err.message}`, 'error');
      return;
    }
    if (err.status === 401) {
      const had = !!getToken();
      setToken(''); // a refused token is of no further use
      showLogin(had ? 'The token was refused. Enter the current token.' : '');
    } else if (err.isBackendDown) {
      showBanner('redis', 'Redis is unavailable.',
        'retryd cannot reach its Redis server, so nothing can be read or changed right now. ' +
        'The console retries every 5 seconds.');
    } else if (err.isNetwork) {
      showBanner('network', 'retryd is unreachable.',
        'The console cannot connect to retryd. It retries every 5 seconds.');
    } else {
      toast(problemText(err), 'error');
    }
  }

  // -------------------------------------------------------------------------
  // Banner, toasts, loading notes
  // -------------------------------------------------------------------------
  let bannerKind = '';
  function showBanner(kind, title, detail) {
    bannerKind = kind;
    const b = $('#banner');
    b.className = `banner banner-${kind}`;
    setText($('#banner-title'), title);
    setText($('#banner-detail'), detail);
    b.hidden = false;
  }
  function hideBanner() {
    bannerKind = '';
    $('#banner').hidden = true;
  }
  function connectionOk() {
    if (bannerKind === 'redis' || bannerKind === 'network') hideBanner();
  }

  function toast(text, kind) {
    const box = $('#toasts');
    const close = h('button', { type: 'button', class: 'toast-close', 'aria-label': 'Dismiss',
                                text: '×' });
    const t = h('div', { class: `toast toast-${kind || 'info'}` },
      h('span', { class: 'toast-text', text }), close);
    const remove = () => t.remove();
    close.addEventListener('click', remove);
    box.appendChild(t);
    setTimeout(remove, kind === 'error' ? 12000 : 6000);
    while (box.children.length > 4) box.firstChild.remove();
  }

  function markUpdated() {
    const d = new Date();
    setText($('#updated-at'), `Updated ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`);
  }

  // -------------------------------------------------------------------------
  // Dialogs: confirmation (says what and how many) and progress (cancellable)
  // -------------------------------------------------------------------------
  /** Resolves to {reason, to} when confirmed, null when cancelled. With
   *  o.target the dialog offers a target queue (a redrive: `to` is the
   *  name typed, '' to replay in place). */
  function confirmDialog(o) {
    const dlg = $('#confirm-dialog');
    const ok = $('#confirm-ok');
    const cancel = $('#confirm-cancel');
    const reason = $('#confirm-reason');
    setText($('#confirm-title'), o.title);
    setText($('#confirm-message'), o.message);
    setText($('#confirm-count'), o.count);
    setText(ok, o.ok);
    ok.className = `btn ${o.danger === false ? 'btn-primary' : 'btn-danger'}`;
    $('#confirm-extra').hidden = !o.reason;
    reason.value = '';
    const target = $('#confirm-target');
    $('#confirm-target-row').hidden = !o.target;
    target.value = '';
    return new Promise((resolve) => {
      const done = (v) => {
        ok.removeEventListener('click', onOk);
        cancel.removeEventListener('click', onCancel);
        dlg.removeEventListener('cancel', onEsc);
        if (dlg.open) dlg.close();
        resolve(v);
      };
      const onOk = () => done({ reason: reason.value.trim(), to: o.target ? target.value : '' });
      const onCancel = () => done(null);
      const onEsc = (e) => { e.preventDefault(); done(null); };
      ok.addEventListener('click', onOk);
      cancel.addEventListener('click', onCancel);
      dlg.addEventListener('cancel', onEsc);
      dlg.showModal();
      (o.reason ? reason : cancel).focus();
    });
  }

  /** A batch replay's body, with `to` when the operator named a target. */
  function withTarget(body, to) {
    return to ? Object.assign({}, body, { to }) : body;
  }

  /** "Replayed 3 messages" or, for a redrive, "Moved 3 messages to queue “x”". */
  function replayedText(n, to) {
    return to ? `Moved ${plural(n, 'message')} to queue “${to}”` : `Replayed ${plural(n, 'message')}`;
  }

  /** A modal progress note with a Cancel button that aborts `signal`. */
  function progressDialog(title) {
    const dlg = $('#progress-dialog');
    const ac = new AbortController();
    const cancel = $('#progress-cancel');
    setText($('#progress-title'), title);
    setText($('#progress-message'), 'Starting…');
    const onCancel = () => ac.abort();
    const onEsc = (e) => { e.preventDefault(); ac.abort(); };
    cancel.addEventListener('click', onCancel);
    dlg.addEventListener('cancel', onEsc);
    dlg.showModal();
    cancel.focus();
    return {
      signal: ac.signal,
      set(text) { setText($('#progress-message'), text); },
      close() {
        cancel.removeEventListener('click', onCancel);
        dlg.removeEventListener('cancel', onEsc);
        if (dlg.open) dlg.close();
      },
    };
  }

  /** Runs fn over items, at most `limit` at a time. */
  async function mapLimit(items, limit, fn) {
    const out = new Array(items.length);
    let next = 0;
    async function worker() {
      while (next < items.length) {
        const i = next++;
        out[i] = await fn(items[i], i);
      }
    }
    await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
    return out;
  }

  // -------------------------------------------------------------------------
  // Listing helpers shared by the queue page, replay-all and the CSV export
  // -------------------------------------------------------------------------
  function hasFilter(f) { return !!(f.error || f.since || f.until); }

  function listPath(queue, f, limit, cursor) {
    const p = new URLSearchParams();
    if (f.status && f.status !== 'all') p.set('status', f.status);
    p.set('limit', String(limit));
    if (cursor) p.set('cursor', cursor);
    if (f.error) p.set('error_contains', f.error);
    if (f.since) p.set('since', f.since);
    if (f.until) p.set('until', f.until);
    return `${queuePath(queue)}/messages?${p.toString()}`;
  }

  /** Walks the whole listing of filter f, SCAN_LIMIT per call, calling
   *  onPage(messages) for each page. */
  async function scanAll(queue, f, signal, onPage) {
    let cursor = '';
    let calls = 0;
    do {
      const page = await api('GET', listPath(queue, f, SCAN_LIMIT, cursor), undefined, { signal });
      calls++;
      onPage(page.messages || [], calls, page.total);
      cursor = page.next_cursor || '';
    } while (cursor);
  }

  function describeFilter(f) {
    const parts = [];
    if (f.error) parts.push(`last error contains “${f.error}”`);
    if (f.since && f.until) parts.push(`updated between ${fmtLocal(f.since)} and ${fmtLocal(f.until)}`);
    else if (f.since) parts.push(`updated since ${fmtLocal(f.since)}`);
    else if (f.until) parts.push(`updated until ${fmtLocal(f.until)}`);
    return parts.join(', ');
  }

  // -------------------------------------------------------------------------
  // CSV (RFC 4180: fields with " , CR or LF quoted, quotes doubled, CRLF rows)
  // -------------------------------------------------------------------------
  const CSV_COLUMNS = ['id', 'queue', 'status', 'retry_count', 'max_retries', 'retry_after',
    'last_error', 'lease_expires_at', 'created_at', 'updated_at', 'payload', 'history_count'];

  // Payloads and errors come from producers and workers: a cell a spreadsheet
  // would run as a formula (it starts with = + - @ TAB or CR) is neutralised as
  // OWASP's "CSV Injection" page says, with a single quote in front, quoted.
  function csvField(v) {
    if (v === null || v === undefined) return '';
    const s = String(v);
    if (/^[=+\-@\t\r]/.test(s)) return `"'${s.replace(/"/g, '""')}"`;
    return /[",\r\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
  }

  function csvRow(values) { return values.map(csvField).join(',') + '\r\n'; }

  function downloadText(name, text, type) {
    const blob = new Blob([text], { type });
    const url = URL.createObjectURL(blob);
    const a = h('a', { href: url, download: name, class: 'visually-hidden' });
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
  }

  // -------------------------------------------------------------------------
  // Token prompt
  // -------------------------------------------------------------------------
  function showLogin(message) {
    const shown = $('#login-form');
    if (shown) { // several calls may fail at once: keep the one prompt
      if (message) { const e = $('#token-error'); e.hidden = false; setText(e, message); }
      return;
    }
    destroyView();
    document.body.classList.add('signed-out');
    const main = clear($('#main'));
    document.title = 'Sign in — retryd';
    setText($('#updated-at'), '');
    const input = h('input', { type: 'password', id: 'token-input', name: 'token',
      autocomplete: 'off', spellcheck: 'false', required: true, 'aria-describedby': 'token-help' });
    const err = h('p', { class: 'form-error', id: 'token-error', role: 'alert', hidden: !message,
                         text: message || '' });
    const form = h('form', { class: 'login-form', id: 'login-form', novalidate: true },
      h('label', { for: 'token-input', text: 'Bearer token' }),
      input,
      err,
      h('div', { class: 'login-actions' },
        h('button', { type: 'submit', class: 'btn btn-primary', text: 'Sign in' })));
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      const t = input.value.trim();
      if (!t) {
        err.hidden = false;
        setText(err, 'Enter the token.');
        input.focus();
        return;
      }
      setToken(t);
      route(true);
    });
    main.appendChild(h('section', { class: 'login', 'aria-labelledby': 'login-title' },
      h('h1', { id: 'login-title', text: 'Token required' }),
      h('p', { id: 'token-help', class: 'muted' },
        'This retryd runs with --token-file or --auth-token-file: every API call needs a bearer token, ',
        'and the console shows only what the token may do. ',
        'The console keeps it in this tab\'s session storage only, until you sign out or ',
        'close the tab.'),
      form));
    input.focus();
  }

  // -------------------------------------------------------------------------
  // Views
  // -------------------------------------------------------------------------
  let view = null;

  function destroyView() {
    if (view && view.destroy) view.destroy();
    view = null;
  }

  function emptyRow(cols, text, cls) {
    return h('tr', { class: `empty-row ${cls || ''}` },
      h('td', { colspan: cols, text }));
  }

  function errorNote(err) {
    if (err && err.isBackendDown) return 'Could not load: Redis is unavailable.';
    if (err && err.isNetwork) return 'Could not load: retryd is unreachable.';
    return `Could not load: ${problemText(err)}`;
  }

  function breadcrumb(items) {
    const ol = h('ol');
    items.forEach((it, i) => {
      const last = i === items.length - 1;
      ol.appendChild(h('li', null, last || !it.href
        ? h('span', { 'aria-current': last ? 'page' : null, text: it.text })
        : h('a', { href: it.href, text: it.text })));
    });
    return h('nav', { class: 'breadcrumb', 'aria-label': 'Breadcrumb' }, ol);
  }

  function queueHref(q, params) {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {})) if (v) p.set(k, String(v));
    const s = p.toString();
    return `#/queues/${enc(q)}${s ? `?${s}` : ''}`;
  }
  const messageHref = (q, id) => `#/queues/${enc(q)}/messages/${enc(id)}`;

  /** The filter text for an entry of top_errors (cut entries end with "..."). */
  function errorFilterText(err) {
    if (utf8Bytes(err) > 200 && err.endsWith('...')) return err.slice(0, -3);
    return err;
  }

  // ---- Throughput charts (docs/series.md) -------------------------------------
  // GET /queues/{q}/stats?series=minute|hour: enqueued, succeeded, failed, dead
  // and replayed per bucket, oldest first. Drawn as inline SVG built with DOM
  // calls (no markup strings, no style attributes); every line carries its
  // values in data-values and every non-zero point its value in data-value and
  // a <title>, so what is drawn can be read back.
  const SERIES = ['enqueued', 'succeeded', 'failed', 'dead', 'replayed'];
  const SERIES_LABEL = { enqueued: 'Enqueued', succeeded: 'Succeeded', failed: 'Failed', dead: 'Dead',
                         replayed: 'Replayed' };
  const RESOLUTIONS = { minute: 'Per minute, last 2 hours', hour: 'Per hour, last 8 days' };
  const OVERVIEW_SERIES_QUEUES = 10;  // queues the overview chart adds up
  const SVG_NS = 'http://www.w3.org/2000/svg';
  // The chart's frame in CSS pixels; its width is the panel's (measured at
  // each draw, drawn again when it changes), so text stays 11 px on a phone.
  const CH = { h: 180, l: 44, r: 8, t: 10, b: 22, minW: 240 };

  function svg(tag, attrs, ...kids) {
    const el = document.createElementNS(SVG_NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
    for (const k of kids) {
      if (k !== null && k !== undefined) el.appendChild(typeof k === 'string' ? document.createTextNode(k) : k);
    }
    return el;
  }

  /** Adds up the series of several queues, aligned on their bucket times (two
   *  reads either side of a minute boundary start one bucket apart). */
  function sumSeries(list) {
    const all = list.filter((x) => x && Array.isArray(x.enqueued));
    if (!all.length) return null;
    const step = all[0].step_seconds * 1000;
    const start = Math.max(...all.map((x) => x.start));
    const len = all[0].enqueued.length;
    const out = { resolution: all[0].resolution, start, step_seconds: all[0].step_seconds };
    for (const name of SERIES) {
      out[name] = new Array(len).fill(0);
      for (const x of all) {
        const shift = Math.round((start - x.start) / step);
        for (let i = 0; i < len; i++) out[name][i] += x[name][i + shift] || 0;
      }
    }
    return out;
  }

  function bucketLabel(ms, resolution) {
    const d = new Date(ms);
    const hm = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
    return resolution === 'hour' ? `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${hm}` : hm;
  }

  class SeriesChart {
    /** id: the section's id; onChange(resolution) when the viewer switches. */
    constructor(id, title, onChange) {
      this.resolution = 'minute';
      this.buttons = {};
      const group = h('div', { class: 'seg-group', role: 'group', 'aria-label': 'Resolution' });
      for (const [res, label] of [['minute', 'Minutes'], ['hour', 'Hours']]) {
        const b = h('button', { type: 'button', class: 'btn btn-sm seg', 'data-resolution': res, text: label,
          'aria-pressed': String(res === this.resolution),
          onclick: () => {
            if (this.resolution === res) return;
            this.resolution = res;
            for (const [r2, b2] of Object.entries(this.buttons)) setAttr(b2, 'aria-pressed', String(r2 === res));
            onChange(res);
          } });
        this.buttons[res] = b;
        group.appendChild(b);
      }
      const legend = h('ul', { class: 'chart-legend' },
        SERIES.map((n) => h('li', null, h('span', { class: `swatch swatch-${n}`, 'aria-hidden': 'true' }),
          SERIES_LABEL[n], ' ', h('span', { class: `legend-total muted`, 'data-series': n }))));
      this.totals = {};
      for (const el of legend.querySelectorAll('.legend-total')) this.totals[el.dataset.series] = el;
      this.note = h('p', { class: 'chart-note muted', text: RESOLUTIONS.minute });
      this.svg = svg('svg', { class: 'chart-svg', viewBox: `0 0 640 ${CH.h}`, role: 'img',
                              'aria-label': title, preserveAspectRatio: 'xMidYMid meet' });
      this.last = null;
      this.width = 0;
      if (window.ResizeObserver) {
        new ResizeObserver(() => {
          if (this.last && Math.abs(this.measure() - this.width) >= 1) this.render(this.last.series, this.last.note);
        }).observe(this.svg);
      }
      this.el = h('section', { class: 'panel chart-panel', id, 'aria-label': title },
        h('div', { class: 'panel-head' }, h('h2', { text: title }), group),
        this.note, this.svg, legend);
    }

    measure() {
      return Math.max(CH.minW, Math.round(this.svg.getBoundingClientRect().width || 640));
    }

    /** Draws series (an API "series" object, or null for no data yet). */
    render(series, note) {
      const s = series;
      const root = this.svg;
      this.last = { series, note };
      this.width = this.measure();
      const W = this.width;
      root.setAttribute('viewBox', `0 0 ${W} ${CH.h}`);
      while (root.firstChild) root.removeChild(root.firstChild);
      setText(this.note, note || RESOLUTIONS[this.resolution]);
      if (!s) { root.removeAttribute('data-start'); return; }
      const len = s.enqueued.length;
      const step = s.step_seconds * 1000;
      root.setAttribute('data-resolution', s.resolution);
      root.setAttribute('data-start', String(s.start));
      root.setAttribute('data-step', String(s.step_seconds));
      let max = 1;
      for (const n of SERIES) for (const v of s[n]) if (v > max) max = v;
      const iw = W - CH.l - CH.r;
      const ih = CH.h - CH.t - CH.b;
      const x = (i) => CH.l + (len > 1 ? (i * iw) / (len - 1) : 0);
      const y = (v) => CH.t + ih - (v * ih) / max;
      // Grid and y labels: 0, half, max.
      for (const v of [0, max / 2, max]) {
        const yy = y(v).toFixed(1);
        root.appendChild(svg('line', { class: 'chart-grid', x1: CH.l, x2: W - CH.r, y1: yy, y2: yy }));
        root.appendChild(svg('text', { class: 'chart-label', x: CH.l - 4, y: yy, 'text-anchor': 'end',
                                       'dominant-baseline': 'middle' }, fmtInt(Math.round(v))));
      }
      // x labels: the oldest bucket, the middle one, the current one.
      for (const [i, anchor] of [[0, 'start'], [Math.floor((len - 1) / 2), 'middle'], [len - 1, 'end']]) {
        root.appendChild(svg('text', { class: 'chart-label', x: x(i).toFixed(1), y: CH.h - 6, 'text-anchor': anchor },
          bucketLabel(s.start + i * step, s.resolution)));
      }
      for (const n of SERIES) {
        const vals = s[n];
        const g = svg('g', { class: `series series-${n}`, 'data-series': n, 'data-values': vals.join(',') });
        g.appendChild(svg('polyline', { class: 'series-line',
          points: vals.map((v, i) => `${x(i).toFixed(1)},${y(v).toFixed(1)}`).join(' ') }));
        vals.forEach((v, i) => {
          if (!v) return;
          const t = s.start + i * step;
          g.appendChild(svg('circle', { class: 'series-point', cx: x(i).toFixed(1), cy: y(v).toFixed(1), r: 2.5,
            'data-t': t, 'data-value': v }, svg('title', null, `${bucketLabel(t, s.resolution)} ${SERIES_LABEL[n]}: ${fmtInt(v)}`)));
        });
        root.appendChild(g);
        setText(this.totals[n], fmtInt(vals.reduce((a, b) => a + b, 0)));
      }
    }
  }

  // ---- Overview --------------------------------------------------------------
  class OverviewView {
    start() {
      document.title = 'Queues — retryd';
      this.ac = new AbortController();
      this.rows = new Map();
      this.loaded = false;
      this.cards = {};
      const cards = h('div', { class: 'cards', id: 'summary-cards' });
      for (const [key, label] of [['pending', 'Pending'], ['processing', 'Processing'],
        ['succeeded', 'Succeeded'], ['dead', 'Dead'], ['dead_last_24h', 'Dead in 24 h']]) {
        const value = h('span', { class: 'card-value', text: '–' });
        this.cards[key] = value;
        cards.appendChild(h('div', { class: `card card-${key}` },
          h('span', { class: 'card-label', text: label }), value));
      }
      this.tbody = h('tbody', null, emptyRow(7, 'Loading queues…', 'loading'));
      this.errBody = h('tbody', null, emptyRow(3, 'Loading…', 'loading'));
      this.chart = new SeriesChart('overview-chart', 'Throughput', () => {
        if (this.queues) this.loadChart(this.queues, this.ac.signal).catch((e) => {
          if (e.name !== 'AbortError') handleError(e);
        });
      });
      const main = $('#main');
      appendKids(main, [
        h('div', { class: 'page-head' },
          h('h1', { text: 'Queues' }),
          h('p', { class: 'page-sub', text: 'Every queue of this retryd, with its messages by state.' })),
        cards,
        this.chart.el,
        h('section', { class: 'panel', 'aria-labelledby': 'queues-h' },
          h('h2', { id: 'queues-h', text: 'Queues' }),
          h('div', { class: 'table-wrap' },
            h('table', { class: 'data', id: 'queues-table' },
              h('thead', null, h('tr', null,
                h('th', { scope: 'col', text: 'Queue' }),
                h('th', { scope: 'col', class: 'num', text: 'Pending' }),
                h('th', { scope: 'col', class: 'num', text: 'Processing' }),
                h('th', { scope: 'col', class: 'num', text: 'Succeeded' }),
                h('th', { scope: 'col', class: 'num', text: 'Dead' }),
                h('th', { scope: 'col', class: 'num', text: 'Dead in 24 h' }),
                h('th', { scope: 'col', class: 'col-action' }, h('span', { class: 'visually-hidden', text: 'Links' })))),
              this.tbody))),
        h('section', { class: 'panel', 'aria-labelledby': 'errors-h' },
          h('h2', { id: 'errors-h' }, 'Top errors ',
            h('span', { class: 'h-note', text: 'of the current dead letters' })),
          h('div', { class: 'table-wrap' },
            h('table', { class: 'data', id: 'errors-table' },
              h('thead', null, h('tr', null,
                h('th', { scope: 'col', class: 'num', text: 'Dead' }),
                h('th', { scope: 'col', text: 'Error' }),
                h('th', { scope: 'col', text: 'Queue' }))),
              this.errBody))),
      ]);
      this.load();
    }

    destroy() { this.ac.abort(); }

    refresh() { return this.load(); }

    async load() {
      if (this.loading) return;
      this.loading = true;
      const signal = this.ac.signal;
      try {
        const queues = await this.allQueues(signal);
        queues.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
        this.renderQueues(queues);
        const withDead = queues.filter((q) => q.counts && q.counts.dead > 0)
          .sort((a, b) => b.counts.dead - a.counts.dead).slice(0, OVERVIEW_STATS_QUEUES);
        const stats = await mapLimit(withDead, CONCURRENCY, (q) =>
          api('GET', `${queuePath(q.name)}/stats?top=5`, undefined, { signal })
            .catch((e) => { if (e instanceof ApiError && e.status === 404) return null; throw e; }));
        this.renderErrors(stats.filter(Boolean), withDead.length < queues.filter((q) => q.counts && q.counts.dead > 0).length);
        this.queues = queues;
        await this.loadChart(queues, signal);
        this.loaded = true;
        markUpdated();
      } catch (e) {
        if (e.name === 'AbortError') return;
        if (!this.loaded) {
          clear(this.tbody).appendChild(emptyRow(7, errorNote(e), 'error'));
          clear(this.errBody).appendChild(emptyRow(3, errorNote(e), 'error'));
        }
        handleError(e);
      } finally {
        this.loading = false;
      }
    }

    // The chart adds up the series of the OVERVIEW_SERIES_QUEUES queues with
    // the most messages (all of them when there are no more).
    async loadChart(queues, signal) {
      const size = (q) => STATES.reduce((n, st) => n + ((q.counts && q.counts[st]) || 0), 0);
      const top = queues.slice().sort((a, b) => size(b) - size(a) || (a.name < b.name ? -1 : 1))
        .slice(0, OVERVIEW_SERIES_QUEUES);
      const res = this.chart.resolution;
      const stats = await mapLimit(top, CONCURRENCY, (q) =>
        api('GET', `${queuePath(q.name)}/stats?top=1&series=${res}`, undefined, { signal })
          .catch((e) => { if (e instanceof ApiError && e.status === 404) return null; throw e; }));
      const names = top.map((q) => q.name);
      this.chart.svg.setAttribute('data-queues', JSON.stringify(names));
      const scope = queues.length > top.length
        ? `the ${top.length} queues with the most messages` : `all ${plural(queues.length, 'queue')}`;
      this.chart.render(sumSeries(stats.filter(Boolean).map((st) => st.series)),
        `${RESOLUTIONS[res]}, ${scope}`);
    }

    // GET /queues is paged: follow next_cursor (at most QUEUES_PAGES_MAX pages).
    async allQueues(signal) {
      const all = [];
      let cursor = null;
      for (let page = 0; page < QUEUES_PAGES_MAX; page++) {
        const qs = new URLSearchParams({ limit: String(QUEUES_PAGE) });
        if (cursor !== null) qs.set('cursor', cursor);
        const data = await api('GET', `/queues?${qs}`, undefined, { signal });
        for (const q of (data && data.queues) || []) all.push(q);
        cursor = data && typeof data.next_cursor === 'string' ? data.next_cursor : null;
        if (cursor === null) break;
      }
      return all;
    }

    renderQueues(queues) {
      const totals = { pending: 0, processing: 0, succeeded: 0, dead: 0, dead_last_24h: 0 };
      for (const q of queues) {
        for (const s of STATES) totals[s] += (q.counts && q.counts[s]) || 0;
        totals.dead_last_24h += q.dead_last_24h || 0;
      }
      for (const [k, el] of Object.entries(this.cards)) setText(el, fmtInt(totals[k]));
      this.cards.dead.parentElement.classList.toggle('alert', totals.dead > 0);

      if (!queues.length) {
        this.rows.clear();
        clear(this.tbody).appendChild(emptyRow(7,
          'No queues yet. A queue appears with its first enqueue (POST /queues/{q}/messages).'));
        return;
      }
      const seen = new Set();
      let i = 0;
      for (const q of queues) {
        seen.add(q.name);
        let row = this.rows.get(q.name);
        if (!row) {
          row = this.makeQueueRow(q.name);
          this.rows.set(q.name, row);
        }
        this.updateQueueRow(row, q);
        const at = this.tbody.children[i];
        if (at !== row.tr) this.tbody.insertBefore(row.tr, at || null);
        i++;
      }
      for (const [name, row] of this.rows) {
        if (!seen.has(name)) { row.tr.remove(); this.rows.delete(name); }
      }
      for (const tr of Array.from(this.tbody.children)) {
        if (!tr.dataset.queue) tr.remove(); // the loading / empty row
      }
    }

    makeQueueRow(name) {
      const row = { cells: {} };
      row.tr = h('tr', { 'data-queue': name });
      // The SQS mark (docs/console.md): shown by updateQueueRow for a queue made through the SQS endpoint.
      row.sqs = h('span', { class: 'sqs-mark', title: 'Made through the SQS endpoint', hidden: true });
      row.tr.appendChild(h('th', { scope: 'row', class: 'queue-name' },
        h('a', { href: queueHref(name, { status: 'dead' }), text: name }), row.sqs));
      for (const s of STATES) {
        const a = h('a', { href: queueHref(name, { status: s }), class: 'count-link' });
        row.cells[s] = a;
        row.tr.appendChild(h('td', { class: `num count-${s}` }, a));
      }
      row.cells.dead24 = h('span');
      row.tr.appendChild(h('td', { class: 'num' }, row.cells.dead24));
      row.tr.appendChild(h('td', { class: 'col-action' },
        h('a', { href: queueHref(name, { status: 'dead' }), class: 'btn btn-sm',
                 'aria-label': `Dead letters of ${name}`, text: 'Dead letters' })));
      return row;
    }

    updateQueueRow(row, q) {
      const c = q.counts || {};
      for (const s of STATES) {
        const n = c[s] || 0;
        setText(row.cells[s], fmtInt(n));
        row.cells[s].classList.toggle('zero', n === 0);
        setAttr(row.cells[s], 'aria-label', `${fmtInt(n)} ${s} in ${q.name}`);
      }
      row.cells.dead.parentElement.classList.toggle('has-dead', (c.dead || 0) > 0);
      row.sqs.hidden = !q.sqs;
      setText(row.sqs, q.sqs ? 'SQS' : ''); // no text when hidden: the name cell reads as the name
      const d24 = q.dead_last_24h || 0;
      setText(row.cells.dead24, fmtInt(d24));
      row.cells.dead24.classList.toggle('zero', d24 === 0);
    }

    renderErrors(stats, truncated) {
      const rows = [];
      for (const st of stats) {
        for (const e of st.top_errors || []) rows.push({ queue: st.queue, error: e.error, count: e.count });
      }
      rows.sort((a, b) => b.count - a.count || (a.queue < b.queue ? -1 : 1));
      const top = rows.slice(0, 15);
      const sig = JSON.stringify([top, truncated]);
      if (sig === this.errSig) return; // unchanged: leave the DOM alone
      this.errSig = sig;
      const body = clear(this.errBody);
      if (!top.length) {
        body.appendChild(emptyRow(3, 'No dead letters. Nothing has failed for good.'));
        return;
      }
      for (const r of top) {
        const text = r.error === '' ? '(no error text)' : r.error;
        const filter = errorFilterText(r.error);
        body.appendChild(h('tr', null,
          h('td', { class: 'num' }, h('span', { class: 'pill pill-dead', text: fmtInt(r.count) })),
          h('td', { class: 'error-cell' },
            h('a', { href: queueHref(r.queue, { status: 'dead', error: filter }), class: 'mono trunc',
                     title: text, text })),
          h('td', null, h('a', { href: queueHref(r.queue, { status: 'dead' }), text: r.queue }))));
      }
      if (truncated) {
        body.appendChild(emptyRow(3, `Read from the ${OVERVIEW_STATS_QUEUES} queues with the most dead letters.`, 'note'));
      }
    }
  }

  // ---- A queue's messages ------------------------------------------------------
  function filterFromParams(p) {
    const status = TABS.includes(p.get('status')) ? p.get('status') : 'dead';
    let limit = parseInt(p.get('limit') || '', 10);
    if (!PAGE_SIZES.includes(limit)) limit = DEFAULT_LIMIT;
    return {
      status,
      error: p.get('error') || '',
      since: p.get('since') || '',
      until: p.get('until') || '',
      limit,
      cursor: p.get('cursor') || '',
    };
  }

  function filterKey(f) { return JSON.stringify([f.status, f.error, f.since, f.until, f.limit]); }

  class QueueView {
    start(r) {
      this.queue = r.queue;
      this.ac = new AbortController();
      this.listAc = null;
      this.stack = [];          // cursors of the pages before this one
      this.rows = [];
      this.selected = new Set();
      this.stats = null;
      this.f = filterFromParams(r.params);
      this.build();
      this.fillFilterForm();
      this.refreshCounts();
      this.loadList();
    }

    destroy() {
      this.ac.abort();
      if (this.listAc) this.listAc.abort();
      NARROW.removeEventListener('change', this.onNarrow);
    }

    /** The hash changed but the queue did not: new filter, state or page. */
    update(r) {
      const f = filterFromParams(r.params);
      if (filterKey(f) !== filterKey(this.f)) {
        this.stack = [];
      } else if (f.cursor === '') {
        this.stack = [];
      } else if (this.stack.length && this.stack[this.stack.length - 1] === f.cursor) {
        this.stack.pop(); // browser Back to the page before
      } else if (f.cursor !== this.f.cursor && this.nextCursor === f.cursor) {
        this.stack.push(this.f.cursor);
      }
      const tabChanged = f.status !== this.f.status;
      this.f = f;
      this.selected.clear();
      this.fillFilterForm();
      this.syncTabs();
      if (tabChanged) this.renderTopErrors();
      this.loadList();
    }

    navigate(changes) {
      const f = Object.assign({}, this.f, changes);
      location.hash = queueHref(this.queue, {
        status: f.status, error: f.error, since: f.since, until: f.until,
        limit: f.limit !== DEFAULT_LIMIT ? f.limit : '', cursor: f.cursor,
      });
    }

    build() {
      const q = this.queue;
      document.title = `${q} — retryd`;
      const main = $('#main');
      this.headStats = h('p', { class: 'page-sub head-stats', text: '' });
      // Fairness groups (docs/reference.md "Fairness groups"): shown once the queue has any.
      this.groupsLink = h('a', { class: 'groups-link', id: 'queue-groups-link', hidden: true,
        href: `#/queues/${enc(q)}/groups` });
      this.tabs = {};
      const tabs = h('nav', { class: 'tabs', 'aria-label': 'Message state' });
      for (const t of TABS) {
        const count = h('span', { class: 'tab-count' });
        const a = h('a', { href: queueHref(q, { status: t }), class: `tab tab-${t}` },
          h('span', { text: t === 'all' ? 'All' : t[0].toUpperCase() + t.slice(1) }), count);
        this.tabs[t] = { a, count };
        tabs.appendChild(a);
      }
      this.syncTabs();

      // Filters
      this.inError = h('input', { type: 'search', id: 'filter-error', name: 'error', maxlength: 255,
        placeholder: 'text in the last error', autocomplete: 'off', spellcheck: 'false' });
      this.inSince = h('input', { type: 'datetime-local', id: 'filter-since', step: 1 });
      this.inUntil = h('input', { type: 'datetime-local', id: 'filter-until', step: 1 });
      this.inLimit = h('select', { id: 'filter-limit' },
        PAGE_SIZES.map((n) => h('option', { value: String(n), text: String(n) })));
      this.filterErr = h('p', { class: 'form-error', role: 'alert', hidden: true });
      const presets = h('div', { class: 'presets', role: 'group', 'aria-label': 'Updated in the last' },
        h('span', { class: 'muted', text: 'Last' }),
        [['15 min', 15 * 60], ['1 h', 3600], ['24 h', 86400], ['7 d', 7 * 86400]].map(([label, s]) =>
          h('button', { type: 'button', class: 'btn btn-sm btn-ghost', text: label,
            'aria-label': `Updated in the last ${label}`,
            onclick: () => this.navigate({ since: new Date(Date.now() - s * 1000).toISOString(),
                                           until: '', cursor: '' }) })));
      const form = h('form', { class: 'filters', role: 'search', 'aria-label': 'Filter messages' },
        h('div', { class: 'field field-grow' },
          h('label', { for: 'filter-error', text: 'Error contains' }), this.inError),
        h('div', { class: 'field' },
          h('label', { for: 'filter-since', text: 'Updated from' }), this.inSince),
        h('div', { class: 'field' },
          h('label', { for: 'filter-until', text: 'Updated to' }), this.inUntil),
        h('div', { class: 'field field-narrow' },
          h('label', { for: 'filter-limit', text: 'Per page' }), this.inLimit),
        h('div', { class: 'field field-buttons' },
          h('button', { type: 'submit', class: 'btn btn-primary', id: 'filter-apply', text: 'Apply' }),
          h('button', { type: 'button', class: 'btn', id: 'filter-clear', text: 'Clear',
            onclick: () => this.navigate({ error: '', since: '', until: '', cursor: '' }) })),
        presets,
        this.filterErr);
      form.addEventListener('submit', (e) => { e.preventDefault(); this.applyForm(); });
      // On a phone the filter folds away (open when one is set); on a wide
      // screen it is always open and its summary hidden.
      this.filterSummary = h('span', { class: 'filter-summary' });
      this.filterBox = h('details', { class: 'filter-box', open: !NARROW.matches || hasFilter(this.f) },
        h('summary', null, h('span', { class: 'filter-label', text: 'Filter' }), this.filterSummary), form);
      this.onNarrow = () => { if (!NARROW.matches) this.filterBox.open = true; };
      NARROW.addEventListener('change', this.onNarrow);

      // Toolbar
      this.btnReplaySel = h('button', { type: 'button', class: 'btn', id: 'replay-selected',
        onclick: () => this.replaySelected() });
      this.btnKillSel = h('button', { type: 'button', class: 'btn', id: 'kill-selected',
        onclick: () => this.killSelected() });
      this.btnDeleteSel = h('button', { type: 'button', class: 'btn', id: 'delete-selected',
        onclick: () => this.deleteSelected() });
      this.btnReplayAll = h('button', { type: 'button', class: 'btn btn-primary', id: 'replay-all',
        onclick: () => this.replayAll() });
      this.btnExport = h('button', { type: 'button', class: 'btn', id: 'export-csv',
        text: 'Export CSV', onclick: () => this.exportCsv() });
      this.btnRefresh = h('button', { type: 'button', class: 'btn btn-ghost', id: 'reload-list',
        text: 'Reload', onclick: () => { this.refreshCounts(); this.loadList(); } });
      const toolbar = h('div', { class: 'toolbar', role: 'toolbar', 'aria-label': 'Actions' },
        h('div', { class: 'toolbar-group' }, this.btnReplaySel, this.btnKillSel, this.btnDeleteSel),
        h('div', { class: 'toolbar-group toolbar-right' }, this.btnReplayAll, this.btnExport, this.btnRefresh));

      this.listStatus = h('p', { class: 'list-status', id: 'list-status', role: 'status' });
      this.checkAll = h('input', { type: 'checkbox', id: 'check-all',
        'aria-label': 'Select every message on this page', onchange: () => this.toggleAll() });
      this.tbody = h('tbody');
      this.table = h('table', { class: 'data messages', id: 'messages-table' },
        h('thead', null, h('tr', null,
          h('th', { scope: 'col', class: 'col-check' }, this.checkAll),
          h('th', { scope: 'col', class: 'col-id', text: 'ID' }),
          h('th', { scope: 'col', class: 'col-status', text: 'Status' }),
          h('th', { scope: 'col', class: 'num', text: 'Retries' }),
          h('th', { scope: 'col', text: 'Last error' }),
          h('th', { scope: 'col', title: 'Your local time; hover a time for UTC', text: 'Updated' }),
          h('th', { scope: 'col', text: 'Payload' }),
          h('th', { scope: 'col', class: 'col-action' }, h('span', { class: 'visually-hidden', text: 'Actions' })))),
        this.tbody);

      this.btnFirst = h('button', { type: 'button', class: 'btn btn-sm', text: '« First',
        onclick: () => this.navigate({ cursor: '' }) });
      this.btnPrev = h('button', { type: 'button', class: 'btn btn-sm', text: '‹ Previous',
        onclick: () => this.navigate({ cursor: this.stack.length ? this.stack[this.stack.length - 1] : '' }) });
      this.btnNext = h('button', { type: 'button', class: 'btn btn-sm', id: 'next-page', text: 'Next ›',
        onclick: () => this.navigate({ cursor: this.nextCursor }) });
      this.pageNo = h('span', { class: 'page-no muted' });
      const pager = h('nav', { class: 'pager', 'aria-label': 'Pages' },
        this.btnFirst, this.btnPrev, this.pageNo, this.btnNext);

      this.topErrors = h('div', { class: 'top-errors', id: 'queue-top-errors', hidden: true });
      this.chart = new SeriesChart('queue-chart', `Throughput of ${q}`, () => this.refreshCounts());

      // Flow control (docs/reference.md "Pause, caps and rate limits"): the queue's policy and a pause/resume button.
      this.pauseState = h('span', { class: 'pause-state', id: 'pause-state', role: 'status' });
      this.policyText = h('span', { class: 'policy-text muted', id: 'policy-text' });
      this.btnPause = h('button', { type: 'button', class: 'btn btn-sm', id: 'pause-toggle',
        disabled: true, onclick: () => this.togglePause() });
      this.policyBox = h('section', { class: 'policy-strip', id: 'queue-policy',
        'aria-label': 'Flow control' }, this.pauseState, this.policyText, this.btnPause);
      // An SQS queue (policy sqs: true, docs/sqs.md): the mark beside the name, and its
      // RedrivePolicy as SQS shows it: the policy's dead_letter_queue and max_retries.
      this.sqsMark = h('span', { class: 'sqs-mark', id: 'queue-sqs-mark',
        title: 'Made through the SQS endpoint', hidden: true });
      this.redriveText = h('span', { class: 'policy-text', id: 'sqs-redrive' });
      this.redriveBox = h('section', { class: 'policy-strip', id: 'queue-sqs',
        'aria-label': 'SQS redrive policy', hidden: true },
        h('span', { class: 'muted', text: 'SQS RedrivePolicy' }), this.redriveText);
      // The dead-letter queue (docs/reference.md "Dead-letter queue"): where every death of
      // this queue moves; set with PATCH, so the other fields stay as they are.
      this.dlqInput = h('input', { type: 'text', id: 'dlq-input', class: 'input input-sm',
        maxlength: '255', placeholder: 'none: deaths stay here', autocomplete: 'off',
        'aria-label': 'Dead-letter queue' });
      this.btnDlq = h('button', { type: 'submit', class: 'btn btn-sm', id: 'dlq-save',
        text: 'Save', disabled: true });
      this.dlqForm = h('form', { class: 'policy-strip', id: 'queue-dlq',
        'aria-label': 'Dead-letter queue', onsubmit: (e) => { e.preventDefault(); this.saveDlq(); } },
        h('label', { for: 'dlq-input', class: 'muted', text: 'Dead-letter queue' }),
        this.dlqInput, this.btnDlq);
      // Dead-letter rules (docs/reference.md "Recovery rules"): the policy's list, each with its counters.
      this.rulesBox = h('ol', { class: 'policy-rules', id: 'policy-rules', start: '0',
        'aria-label': 'Dead-letter rules', hidden: true });

      appendKids(main, [
        breadcrumb([{ href: '#/queues', text: 'Queues' }, { text: q }]),
        h('div', { class: 'page-head' },
          h('h1', null, h('span', { class: 'muted h-prefix', text: 'Queue ' }), h('span', { text: q })),
          this.sqsMark, this.headStats, this.groupsLink),
        this.policyBox,
        this.redriveBox,
        this.dlqForm,
        this.chart.el,
        this.rulesBox,
        tabs,
        this.topErrors,
        h('section', { class: 'panel panel-flush', 'aria-label': 'Messages' },
          this.filterBox, toolbar, this.listStatus,
          h('div', { class: 'table-wrap' }, this.table),
          pager),
      ]);
      this.updateToolbar();
    }

    syncTabs() {
      for (const t of TABS) {
        const on = t === this.f.status;
        setAttr(this.tabs[t].a, 'aria-current', on ? 'page' : null);
        this.tabs[t].a.classList.toggle('active', on);
      }
    }

    fillFilterForm() {
      this.inError.value = this.f.error;
      this.inSince.value = isoToLocalInput(this.f.since);
      this.inUntil.value = isoToLocalInput(this.f.until);
      this.inLimit.value = String(this.f.limit);
      this.filterErr.hidden = true;
      setText(this.filterSummary, hasFilter(this.f) ? describeFilter(this.f) : 'none');
      if (hasFilter(this.f)) this.filterBox.open = true;
    }

    applyForm() {
      const since = localInputToIso(this.inSince.value);
      const until = localInputToIso(this.inUntil.value);
      const bad = (msg) => { this.filterErr.hidden = false; setText(this.filterErr, msg); };
      if (since === null) return bad('"Updated from" is not a valid time.');
      if (until === null) return bad('"Updated to" is not a valid time.');
      if (since && until && since > until) return bad('"Updated from" is after "Updated to".');
      if (utf8Bytes(this.inError.value) > 255) return bad('The error text is at most 255 bytes.');
      this.filterErr.hidden = true;
      const next = { error: this.inError.value, since, until,
        limit: parseInt(this.inLimit.value, 10) || DEFAULT_LIMIT, cursor: '' };
      const same = next.error === this.f.error && next.since === this.f.since &&
        next.until === this.f.until && next.limit === this.f.limit && !this.f.cursor;
      if (same) this.loadList(); else this.navigate(next);
    }

    refresh() {
      this.refreshCounts();
      if (this.listFailed) this.loadList();
    }

    /** The policy strip: paused or running, the limits that are set. */
    renderPolicy(p) {
      this.policy = p;
      setText(this.pauseState, p.paused ? 'Paused' : 'Running');
      this.pauseState.classList.toggle('paused', !!p.paused);
      const parts = [];
      parts.push(p.max_in_flight ? `at most ${fmtInt(p.max_in_flight)} in flight` : 'no in-flight cap');
      parts.push(p.rate_limit ? `${p.rate_limit.per_second}/s (burst ${fmtInt(p.rate_limit.burst)})`
                              : 'no rate limit');
      const b = p.backoff || {};
      parts.push(`backoff ${b.base_seconds} s × 2ⁿ up to ${b.max_seconds} s` +
                 (b.jitter && b.jitter !== 'none' ? `, ${b.jitter} jitter` : ''));
      parts.push(`max ${p.max_retries} retries`, `lease ${p.lease_seconds} s`);
      if (p.message_ttl) parts.push(`expire after ${fmtInt(p.message_ttl)} s (${p.on_expiry})`);
      if (p.dead_letter_queue) parts.push(`deaths move to ${p.dead_letter_queue}`);
      setText(this.policyText, parts.join(' · '));
      if (document.activeElement !== this.dlqInput) this.dlqInput.value = p.dead_letter_queue || '';
      this.btnDlq.disabled = false;
      this.renderSqs(p);
      setText(this.btnPause, p.paused ? 'Resume' : 'Pause');
      setAttr(this.btnPause, 'aria-label', p.paused ? `Resume queue ${this.queue}` : `Pause queue ${this.queue}`);
      this.btnPause.disabled = false;
      this.renderRules();
    }

    /** An SQS queue's mark and RedrivePolicy: deadLetterTargetArn is the policy's
     *  dead_letter_queue, maxReceiveCount its max_retries (docs/sqs.md "Attributes and the policy"). */
    renderSqs(p) {
      const sqs = p.sqs === true;
      this.sqsMark.hidden = !sqs;
      setText(this.sqsMark, sqs ? 'SQS' : '');
      this.redriveBox.hidden = !sqs;
      if (!sqs) return;
      setText(this.redriveText, p.dead_letter_queue
        ? `dead-letter queue ${p.dead_letter_queue} · maxReceiveCount ${p.max_retries}`
        : 'none: messages are received until retention ends them');
    }

    /** The dead-letter rules, in order (first match wins), with how often each
     *  brought a message back or sent it dead (stats, by position). */
    renderRules() {
      const rules = (this.policy && this.policy.dead_letter_rules) || [];
      const counts = new Map();
      for (const c of (this.stats && this.stats.dead_letter_rules) || []) counts.set(c.rule, c);
      this.rulesBox.hidden = rules.length === 0;
      const items = rules.map((r, i) => {
        const match = [];
        if (r.error_contains !== undefined) match.push(`error contains “${r.error_contains}”`);
        if (r.error_prefix !== undefined) match.push(`error starts with “${r.error_prefix}”`);
        const action = r.action === 'retry'
          ? `retry after ${fmtInt(r.delay_seconds || 0)} s, at most ${fmtInt(r.max_times || 1)}× per message`
          : 'dead at once';
        const c = counts.get(i) || { retried: 0, dead: 0 };
        return h('li', { id: `policy-rule-${i}` },
          h('span', { class: 'rule-match', text: `${match.join(' and ')} → ${action}` }),
          h('span', { class: 'rule-counts muted',
            text: ` · ${fmtInt(c.retried)} retried · ${fmtInt(c.dead)} dead` }));
      });
      appendKids(clear(this.rulesBox), items);
    }

    async refreshPolicy() {
      try {
        this.renderPolicy(await api('GET', `${queuePath(this.queue)}/policy`, undefined,
                                    { signal: this.ac.signal }));
      } catch (e) {
        if (e.name !== 'AbortError') handleError(e);
      }
    }

    /** PATCH the policy's dead_letter_queue (empty: none); a cycle is 422. */
    async saveDlq() {
      const name = this.dlqInput.value.trim();
      this.btnDlq.disabled = true;
      try {
        const p = await api('PATCH', `${queuePath(this.queue)}/policy`,
                            { dead_letter_queue: name || null });
        this.dlqInput.blur();
        this.renderPolicy(p);
        toast(name ? `Deaths of ${this.queue} now move to ${name}.`
                   : `Deaths of ${this.queue} now stay here.`, 'success');
      } catch (e) {
        handleError(e);
      } finally {
        this.btnDlq.disabled = false;
      }
    }

    async togglePause() {
      if (!this.policy) return;
      const pausing = !this.policy.paused;
      if (pausing) {
        const ok = await confirmDialog({ title: `Pause ${this.queue}?`,
          message: 'Workers lease nothing from this queue until it is resumed. Messages still ' +
                   'arrive, settle, retry and expire.', count: '', ok: 'Pause' });
        if (!ok) return;
      }
      this.btnPause.disabled = true;
      try {
        const r = await api('POST', `${queuePath(this.queue)}/${pausing ? 'pause' : 'resume'}`, {});
        this.renderPolicy(Object.assign({}, this.policy, { paused: r.paused }));
        toast(r.paused ? `Queue ${this.queue} paused.` : `Queue ${this.queue} resumed.`, 'success');
      } catch (e) {
        handleError(e);
      } finally {
        this.btnPause.disabled = false;
      }
    }

    async refreshCounts() {
      this.refreshPolicy();
      if (this.countsLoading) return;
      this.countsLoading = true;
      try {
        const res = this.chart.resolution;
        const st = await api('GET', `${queuePath(this.queue)}/stats?top=10&series=${res}`, undefined,
                             { signal: this.ac.signal });
        this.stats = st;
        if (res === this.chart.resolution) this.chart.render(st.series || null);
        if (this.rulesBox) this.renderRules();
        const c = st.counts || {};
        let all = 0;
        for (const s of STATES) {
          setText(this.tabs[s].count, fmtInt(c[s] || 0));
          all += c[s] || 0;
          this.tabs[s].count.classList.toggle('zero', !c[s]);
        }
        setText(this.tabs.all.count, fmtInt(all));
        const t = st.totals || {};
        setText(this.headStats, `${fmtInt(t.enqueued || 0)} enqueued · ${fmtInt(t.failed || 0)} failed · ` +
          `${fmtInt(t.retried || 0)} retried · ${fmtInt(t.replayed || 0)} replayed · ` +
          `${fmtInt(st.dead_last_24h || 0)} died in the last 24 h`);
        const ng = typeof st.groups === 'number' ? st.groups : 0;
        this.groupsLink.hidden = ng === 0;
        setText(this.groupsLink, `${fmtInt(ng)} fairness ${ng === 1 ? 'group' : 'groups'} ›`);
        this.renderTopErrors();
        markUpdated();
      } catch (e) {
        if (e.name !== 'AbortError') {
          if (e instanceof ApiError && e.status === 404) return;
          handleError(e);
        }
      } finally {
        this.countsLoading = false;
      }
    }

    renderTopErrors() {
      const box = this.topErrors;
      const errs = (this.stats && this.stats.top_errors) || [];
      const show = this.f.status === 'dead' && errs.length > 0;
      box.hidden = !show;
      if (!show) return;
      const sig = JSON.stringify([errs, this.f.error]);
      if (sig === this.topSig) return;
      this.topSig = sig;
      clear(box);
      box.appendChild(h('h2', { class: 'inline-h', text: 'Top errors' }));
      const list = h('ul', { class: 'error-chips' });
      for (const e of errs) {
        const filter = errorFilterText(e.error);
        const active = filter !== '' && filter === this.f.error;
        list.appendChild(h('li', null,
          h('a', { href: queueHref(this.queue, { status: 'dead', error: filter }),
                   class: `chip${active ? ' active' : ''}`, title: e.error || '(no error text)' },
            h('span', { class: 'chip-count', text: fmtInt(e.count) }),
            h('span', { class: 'chip-text', text: e.error || '(no error text)' }))));
      }
      box.appendChild(list);
    }

    async loadList() {
      if (this.listAc) this.listAc.abort();
      const ac = new AbortController();
      this.listAc = ac;
      const onAbort = () => ac.abort();
      this.ac.signal.addEventListener('abort', onAbort, { once: true });
      const f = this.f;
      this.table.classList.add('is-loading');
      this.table.setAttribute('aria-busy', 'true');
      if (!this.rows.length) {
        clear(this.tbody).appendChild(emptyRow(8, 'Loading messages…', 'loading'));
      }
      setText(this.listStatus, hasFilter(f) ? 'Searching…' : 'Loading…');
      const rows = [];
      let cursor = f.cursor;
      let total = null;
      let calls = 0;
      try {
        do {
          const page = await api('GET', listPath(this.queue, f, f.limit - rows.length, cursor),
                                 undefined, { signal: ac.signal });
          calls++;
          for (const m of page.messages || []) rows.push(m);
          total = page.total;
          cursor = page.next_cursor || '';
          if (calls > 1) {
            setText(this.listStatus, `Searching… ${plural(rows.length, 'match', 'matches')} ` +
              `after ${calls} requests (${fmtInt(total)} ${WHAT[f.status]} to look through)`);
          }
        } while (cursor && rows.length < f.limit && calls < MAX_CALLS_PER_PAGE);
      } catch (e) {
        if (e.name === 'AbortError') return;
        this.listFailed = true;
        this.rows = [];
        clear(this.tbody).appendChild(emptyRow(8, errorNote(e), 'error'));
        setText(this.listStatus, '');
        this.table.classList.remove('is-loading');
        this.table.removeAttribute('aria-busy');
        this.table.dataset.view = location.hash;
        this.nextCursor = '';
        this.updatePager();
        this.updateToolbar();
        handleError(e);
        return;
      } finally {
        this.ac.signal.removeEventListener('abort', onAbort);
      }
      this.listFailed = false;
      this.rows = rows;
      this.nextCursor = cursor;
      this.total = total;
      this.selected.clear();
      this.renderRows();
      this.table.classList.remove('is-loading');
      this.table.removeAttribute('aria-busy');
      // Which view these rows belong to (tests wait on it after a navigation).
      this.table.dataset.view = location.hash;
      this.updateListStatus(calls);
      this.updatePager();
      this.updateToolbar();
      markUpdated();
    }

    updateListStatus() {
      const f = this.f;
      const what = WHAT[f.status];
      const first = this.stack.length * f.limit; // approximate for filtered pages
      let text;
      if (!this.rows.length) {
        text = hasFilter(f)
          ? (this.nextCursor ? `No matches among the ${what} looked through so far: “Next” searches on.`
            : `No ${what} match ${describeFilter(f)}.`)
          : (this.stack.length ? 'No more messages.' : `No ${what} in this queue.`);
      } else if (hasFilter(f)) {
        text = `${plural(this.rows.length, 'match', 'matches')} on this page (${describeFilter(f)}) · ` +
          `${fmtInt(this.total)} ${what} in all`;
      } else if (f.cursor && !this.stack.length) { // opened on a later page: position unknown
        text = `${plural(this.rows.length, 'message')} from the cursor on · ${fmtInt(this.total)} ${what} in all`;
      } else {
        text = `${fmtInt(first + 1)}–${fmtInt(first + this.rows.length)} of ${fmtInt(this.total)} ${what}`;
      }
      setText(this.listStatus, text);
    }

    updatePager() {
      this.btnFirst.disabled = !this.f.cursor;
      this.btnPrev.disabled = !this.f.cursor;
      this.btnNext.disabled = !this.nextCursor;
      setText(this.pageNo, `Page ${this.stack.length + 1}`);
    }

    renderRows() {
      this.table.classList.toggle('single-status', this.f.status !== 'all');
      const body = clear(this.tbody);
      for (const m of this.rows) body.appendChild(this.makeRow(m));
      if (!this.rows.length) {
        body.appendChild(emptyRow(8, hasFilter(this.f) ? 'No messages match the filter on this page.'
          : 'No messages here.'));
      }
      this.syncCheckAll();
    }

    makeRow(m) {
      const id = String(m.id);
      const check = h('input', { type: 'checkbox', class: 'row-check', 'aria-label': `Select message ${id}`,
        checked: this.selected.has(id),
        onchange: (e) => {
          if (e.target.checked) this.selected.add(id); else this.selected.delete(id);
          tr.classList.toggle('selected', e.target.checked);
          this.syncCheckAll();
          this.updateToolbar();
        } });
      const err = m.last_error;
      const payload = typeof m.payload === 'string' ? m.payload : JSON.stringify(m.payload);
      const preview = payload.length > 160 ? `${payload.slice(0, 160)}…` : payload;
      let action = null;
      if (m.status === 'dead') {
        action = h('button', { type: 'button', class: 'btn btn-sm replay-one',
          'aria-label': `Replay message ${id}`, text: 'Replay',
          onclick: (e) => this.replayOne(m, e.currentTarget, tr) });
      }
      const tr = h('tr', { 'data-id': id, 'data-status': m.status },
        h('td', { class: 'col-check' }, check),
        h('td', { class: 'col-id' }, h('a', { href: messageHref(this.queue, id), class: 'mono', text: id,
          'aria-label': `Message ${id}` })),
        h('td', { class: 'col-status' }, statusPill(m.status)),
        h('td', { class: 'num mono' }, `${m.retry_count}/${m.max_retries}`),
        h('td', { class: 'error-cell' }, err === null || err === undefined
          ? h('span', { class: 'muted', text: '—' })
          : h('span', { class: 'mono trunc last-error', title: err, text: err })),
        h('td', { class: 'time-cell' }, timeEl(m.updated_at)),
        h('td', { class: 'payload-cell' }, h('span', { class: 'mono trunc payload', title: preview, text: preview })),
        h('td', { class: 'col-action' }, action));
      return tr;
    }

    syncCheckAll() {
      const n = this.rows.length;
      const k = this.rows.filter((m) => this.selected.has(String(m.id))).length;
      this.checkAll.checked = n > 0 && k === n;
      this.checkAll.indeterminate = k > 0 && k < n;
      this.checkAll.disabled = n === 0;
    }

    toggleAll() {
      const on = this.checkAll.checked;
      this.selected.clear();
      if (on) for (const m of this.rows) this.selected.add(String(m.id));
      for (const tr of this.tbody.querySelectorAll('tr[data-id]')) {
        tr.classList.toggle('selected', on);
        const c = tr.querySelector('.row-check');
        if (c) c.checked = on;
      }
      this.syncCheckAll();
      this.updateToolbar();
    }

    selectedWhere(pred) {
      return this.rows.filter((m) => this.selected.has(String(m.id)) && pred(m.status));
    }

    updateToolbar() {
      const st = this.f.status;
      const replayable = this.selectedWhere((s) => s === 'dead').length;
      const killable = this.selectedWhere((s) => s === 'pending' || s === 'processing').length;
      const deletable = this.selectedWhere((s) => s !== 'processing').length;
      this.btnReplaySel.hidden = !(st === 'dead' || st === 'all');
      this.btnKillSel.hidden = !(st === 'pending' || st === 'processing' || st === 'all');
      this.btnDeleteSel.hidden = st === 'processing';
      setText(this.btnReplaySel, `Replay selected (${replayable})`);
      setText(this.btnKillSel, `Kill selected (${killable})`);
      setText(this.btnDeleteSel, `Delete selected (${deletable})`);
      this.btnReplaySel.disabled = replayable === 0;
      this.btnKillSel.disabled = killable === 0;
      this.btnDeleteSel.disabled = deletable === 0;
      this.btnReplayAll.hidden = st !== 'dead';
      setText(this.btnReplayAll, hasFilter(this.f) ? 'Replay all matching…' : 'Replay all…');
    }

    afterChange() {
      this.refreshCounts();
      this.loadList();
    }

    async replayOne(m, btn, tr) {
      btn.disabled = true;
      try {
        await api('POST', `${messagePath(this.queue, m.id)}/replay`, {}, { signal: this.ac.signal });
        toast(`Message ${m.id} replayed: it is pending again with a fresh retry budget.`, 'success');
        tr.remove();
        this.rows = this.rows.filter((x) => x !== m);
        this.selected.delete(String(m.id));
        if (this.total) this.total--;
        if (!this.rows.length) this.renderRows();
        this.syncCheckAll();
        this.updateToolbar();
        this.updateListStatus();
        this.refreshCounts();
        // Keep focus in the table for keyboard users.
        const nextBtn = this.tbody.querySelector('.replay-one');
        if (nextBtn) nextBtn.focus(); else this.checkAll.focus();
      } catch (e) {
        btn.disabled = false;
        handleError(e);
        if (e instanceof ApiError && (e.status === 409 || e.status === 404)) this.afterChange();
      }
    }

    async replaySelected() {
      const ids = this.selectedWhere((s) => s === 'dead').map((m) => m.id);
      if (!ids.length) return;
      const ok = await confirmDialog({
        title: 'Replay selected dead letters',
        message: `The selected dead letters of queue “${this.queue}” go back to pending with a fresh ` +
          'retry budget (retry count 0, last error cleared) and are claimed before fresh messages.',
        count: `${plural(ids.length, 'message')} will be replayed.`,
        ok: `Replay ${plural(ids.length, 'message')}`, danger: false, target: true,
      });
      if (!ok) return;
      try {
        let replayed = 0;
        for (let i = 0; i < ids.length; i += REPLAY_CHUNK) {
          const res = await api('POST', `${queuePath(this.queue)}/replay`,
                                withTarget({ ids: ids.slice(i, i + REPLAY_CHUNK) }, ok.to));
          replayed += (res && res.replayed) || 0;
        }
        toast(replayedText(replayed, ok.to) +
          (replayed < ids.length ? ` (${fmtInt(ids.length - replayed)} were no longer dead).` : '.'), 'success');
      } catch (e) {
        handleError(e);
      }
      this.afterChange();
    }

    async perMessage(list, title, fn) {
      const p = progressDialog(title);
      let done = 0;
      let failed = 0;
      let firstErr = null;
      try {
        await mapLimit(list, CONCURRENCY, async (m) => {
          if (p.signal.aborted) return;
          try {
            await fn(m, p.signal);
          } catch (e) {
            if (e.name === 'AbortError') return;
            if (e instanceof ApiError && (e.status === 401 || e.isBackendDown || e.isNetwork)) throw e;
            failed++;
            if (!firstErr) firstErr = e;
          }
          done++;
          p.set(`${fmtInt(done)} of ${fmtInt(list.length)} done`);
        });
      } catch (e) {
        p.close();
        handleError(e);
        this.afterChange();
        return null;
      }
      p.close();
      return { done: done - failed, failed, firstErr, cancelled: p.signal.aborted };
    }

    async killSelected() {
      const list = this.selectedWhere((s) => s === 'pending' || s === 'processing');
      if (!list.length) return;
      const ok = await confirmDialog({
        title: 'Kill selected messages',
        message: `The selected messages of queue “${this.queue}” become dead letters now, without ` +
          'further attempts. A worker holding one under a lease will get 409 when it reports.',
        count: `${plural(list.length, 'message')} will be marked dead.`,
        ok: `Kill ${plural(list.length, 'message')}`, reason: true,
      });
      if (!ok) return;
      const body = ok.reason ? { reason: ok.reason } : {};
      const r = await this.perMessage(list, 'Killing messages', (m, signal) =>
        api('POST', `${messagePath(this.queue, m.id)}/kill`, body, { signal }));
      if (r) this.report(r, 'Killed');
      this.afterChange();
    }

    async deleteSelected() {
      const list = this.selectedWhere((s) => s !== 'processing');
      if (!list.length) return;
      const ok = await confirmDialog({
        title: 'Delete selected messages',
        message: `The selected messages of queue “${this.queue}” are removed for good: ` +
          'payload, error and all. This cannot be undone.',
        count: `${plural(list.length, 'message')} will be deleted.`,
        ok: `Delete ${plural(list.length, 'message')}`,
      });
      if (!ok) return;
      const r = await this.perMessage(list, 'Deleting messages', (m, signal) =>
        api('DELETE', messagePath(this.queue, m.id), undefined, { signal }));
      if (r) this.report(r, 'Deleted');
      this.afterChange();
    }

    report(r, verb) {
      let text = `${verb} ${plural(r.done, 'message')}.`;
      if (r.failed) text += ` ${fmtInt(r.failed)} failed: ${problemText(r.firstErr)}`;
      if (r.cancelled) text += ' Cancelled before the end.';
      toast(text, r.failed ? 'error' : 'success');
    }

    /** Replay every dead letter matching the current filter. No filter:
     *  {all:true}; error text only: {error_contains}; a time range: the ids
     *  are collected by paging the listing and replayed 1000 at a time. */
    async replayAll() {
      const f = Object.assign({}, this.f, { status: 'dead' });
      const q = this.queue;
      let count;
      let ids = null;
      if (!hasFilter(f)) {
        try {
          const st = await api('GET', `${queuePath(q)}/stats?top=1`);
          count = (st.counts && st.counts.dead) || 0;
        } catch (e) { handleError(e); return; }
      } else {
        const p = progressDialog('Counting matching dead letters');
        const collect = !!(f.since || f.until);
        const found = [];
        try {
          await scanAll(q, f, p.signal, (msgs, calls, total) => {
            for (const m of msgs) found.push(m.id);
            p.set(`${plural(found.length, 'match', 'matches')} so far, ${fmtInt(Math.min(calls * SCAN_LIMIT, total))} of ` +
              `${fmtInt(total)} dead letters looked through`);
          });
        } catch (e) {
          p.close();
          handleError(e);
          return;
        }
        p.close();
        count = found.length;
        if (collect) ids = found;
      }
      if (count === 0) {
        toast(hasFilter(f) ? `No dead letters match ${describeFilter(f)}.` : 'There are no dead letters.', 'info');
        return;
      }
      const ok = await confirmDialog({
        title: hasFilter(f) ? 'Replay all matching dead letters' : 'Replay all dead letters',
        message: hasFilter(f)
          ? `Every dead letter of queue “${q}” whose ${describeFilter(f)} goes back to pending with a fresh retry budget.`
          : `Every dead letter of queue “${q}” goes back to pending with a fresh retry budget. ` +
            'Letters that die after you confirm are not included.',
        count: `${plural(count, 'message')} will be replayed.`,
        ok: `Replay ${plural(count, 'message')}`, danger: false, target: true,
      });
      if (!ok) return;
      let replayed = 0;
      if (ids) {
        const p = progressDialog('Replaying');
        try {
          for (let i = 0; i < ids.length; i += REPLAY_CHUNK) {
            if (p.signal.aborted) break;
            const res = await api('POST', `${queuePath(q)}/replay`,
                                  withTarget({ ids: ids.slice(i, i + REPLAY_CHUNK) }, ok.to), { signal: p.signal });
            replayed += (res && res.replayed) || 0;
            p.set(`${fmtInt(Math.min(i + REPLAY_CHUNK, ids.length))} of ${fmtInt(ids.length)} sent`);
          }
        } catch (e) {
          p.close();
          handleError(e);
          this.afterChange();
          return;
        }
        p.close();
      } else {
        try {
          const res = await api('POST', `${queuePath(q)}/replay`,
                                withTarget(f.error ? { error_contains: f.error } : { all: true }, ok.to));
          replayed = (res && res.replayed) || 0;
        } catch (e) {
          handleError(e);
          this.afterChange();
          return;
        }
      }
      toast(`${replayedText(replayed, ok.to)}.`, 'success');
      this.refreshCounts();
      if (this.f.cursor) this.navigate({ cursor: '' }); else this.loadList();
    }

    async exportCsv() {
      const f = this.f;
      const q = this.queue;
      const p = progressDialog('Exporting CSV');
      const parts = [csvRow(CSV_COLUMNS)];
      let n = 0;
      try {
        await scanAll(q, f, p.signal, (msgs, calls, total) => {
          for (const m of msgs) {
            parts.push(csvRow(CSV_COLUMNS.map((c) => (c === 'history_count'
              ? (Array.isArray(m.history) ? m.history.length : 0) + (m.history_dropped || 0) : m[c]))));
            n++;
          }
          p.set(`${plural(n, 'row')} so far` + (hasFilter(f)
            ? `, ${fmtInt(Math.min(calls * SCAN_LIMIT, total))} of ${fmtInt(total)} looked through` : ` of ${fmtInt(total)}`));
        });
      } catch (e) {
        p.close();
        handleError(e);
        return;
      }
      p.close();
      const stamp = new Date().toISOString().replace(/[:]/g, '').replace(/\.\d+Z$/, 'Z');
      const safeQ = q.replace(/[^A-Za-z0-9._-]+/g, '_').slice(0, 80) || 'queue';
      downloadText(`retryd-${safeQ}-${f.status}-${stamp}.csv`, parts.join(''), 'text/csv;charset=utf-8');
      toast(`Exported ${plural(n, 'row')} as CSV.`, 'success');
    }
  }

  // ---- One message ---------------------------------------------------------------
  class MessageView {
    start(r) {
      this.queue = r.queue;
      this.id = r.id;
      this.ac = new AbortController();
      this.mode = 'pretty';
      document.title = `Message ${r.id} · ${r.queue} — retryd`;
      this.body = h('div', { class: 'message-body' }, h('p', { class: 'loading-note', text: 'Loading message…' }));
      this.actions = h('div', { class: 'page-actions', role: 'toolbar', 'aria-label': 'Message actions' });
      this.pill = h('span');
      appendKids($('#main'), [
        breadcrumb([{ href: '#/queues', text: 'Queues' },
          { href: queueHref(r.queue, { status: 'dead' }), text: r.queue }, { text: `Message ${r.id}` }]),
        h('div', { class: 'page-head page-head-row' },
          h('h1', null, `Message ${r.id} `, this.pill), this.actions),
        this.body,
      ]);
      this.load();
    }

    destroy() { this.ac.abort(); }

    refresh() { return this.load(); }

    async load() {
      if (this.loading) return;
      this.loading = true;
      try {
        const m = await api('GET', messagePath(this.queue, this.id), undefined, { signal: this.ac.signal });
        const sig = JSON.stringify(m);
        if (sig !== this.sig) {
          this.sig = sig;
          this.m = m;
          this.render();
        }
        markUpdated();
      } catch (e) {
        if (e.name === 'AbortError') return;
        if (e instanceof ApiError && e.status === 404) {
          this.sig = null;
          clear(this.actions);
          clear(this.pill);
          clear(this.body).appendChild(h('div', { class: 'panel empty-panel' },
            h('p', { text: `Message ${this.id} is not in queue “${this.queue}”: it was deleted, or retention removed it.` }),
            h('p', null, h('a', { href: queueHref(this.queue, { status: 'dead' }), text: `Back to ${this.queue}` }))));
        } else {
          if (!this.m) clear(this.body).appendChild(h('p', { class: 'error-note', text: errorNote(e) }));
          handleError(e);
        }
      } finally {
        this.loading = false;
      }
    }

    render() {
      const m = this.m;
      clear(this.pill).appendChild(statusPill(m.status));
      const focusedId = document.activeElement && document.activeElement.id;
      const acts = clear(this.actions);
      if (m.status === 'dead') {
        acts.appendChild(h('button', { type: 'button', class: 'btn btn-primary', id: 'msg-replay',
          text: 'Replay', onclick: () => this.replay() }));
      }
      if (m.status === 'pending' || m.status === 'processing') {
        acts.appendChild(h('button', { type: 'button', class: 'btn btn-danger-outline', id: 'msg-kill',
          text: 'Kill…', onclick: () => this.kill() }));
      }
      if (m.status !== 'processing') {
        acts.appendChild(h('button', { type: 'button', class: 'btn btn-danger-outline', id: 'msg-delete',
          text: 'Delete…', onclick: () => this.remove() }));
      }
      if (focusedId) { const el = document.getElementById(focusedId); if (el) el.focus(); }

      const dl = h('dl', { class: 'facts' });
      const fact = (k, v) => { dl.appendChild(h('dt', { text: k })); dl.appendChild(h('dd', null, v)); };
      fact('Queue', h('a', { href: queueHref(m.queue || this.queue, { status: m.status }), text: m.queue || this.queue }));
      fact('ID', h('span', { class: 'mono', text: String(m.id) }));
      fact('Status', statusPill(m.status));
      fact('Created', timeEl(m.created_at, true));
      fact('Updated', timeEl(m.updated_at, true));
      // docs/reference.md "Priority" and "Messages": 0-9, claimed highest first; expires_at or none.
      fact('Priority', h('span', { class: 'mono', id: 'msg-priority', text: String(m.priority || 0) }));
      fact('Expires', m.expires_at ? h('span', { id: 'msg-expires' }, timeEl(m.expires_at, true))
        : h('span', { class: 'muted', id: 'msg-expires', text: 'never' }));
      if (m.idempotency_key !== undefined && m.idempotency_key !== null) {
        fact('Idempotency key', h('span', { class: 'mono break', text: String(m.idempotency_key) }));
      }
      if (m.worker !== undefined && m.worker !== null) {
        fact('Worker', h('span', { class: 'mono break', id: 'msg-worker', text: String(m.worker) }));
      }
      if (m.origin && m.origin.queue !== undefined) {
        fact('Origin', h('a', { id: 'msg-origin', href: messageHref(m.origin.queue, m.origin.id),
          text: `${m.origin.queue} #${m.origin.id}` }));
      }
      if (m.redriving_to) {
        fact('Being redriven to', h('a', { id: 'msg-redriving', href: queueHref(m.redriving_to, {}),
          text: m.redriving_to }));
      }

      // Timeline: the message's history (docs/reference.md "History"), oldest first: one item
      // per failure (a worker's, a lease expiry, a kill), per replay and per snooze.
      const records = Array.isArray(m.history) ? m.history : [];
      const dropped = m.history_dropped || 0;
      const timeline = h('ol', { class: 'timeline', id: 'history-timeline' });
      for (const r of records) {
        if (r.replayed_at !== undefined) {
          timeline.appendChild(h('li', { class: 'tl-item tl-replayed' },
            h('div', { class: 'tl-head' }, timeEl(r.replayed_at, true),
              h('span', { class: 'tl-what', text: 'Replayed' }))));
          continue;
        }
        if (r.snoozed_at !== undefined) {
          timeline.appendChild(h('li', { class: 'tl-item tl-snoozed' },
            h('div', { class: 'tl-head' }, timeEl(r.snoozed_at, true),
              h('span', { class: 'tl-what', text: 'Snoozed' }),
              h('span', { class: 'muted' }, 'until ', timeEl(r.until, true)))));
          continue;
        }
        const head = h('div', { class: 'tl-head' }, timeEl(r.at, true),
          h('span', { class: 'tl-what', text: `Attempt ${r.attempt} failed` }));
        if (r.lease_expired) head.appendChild(h('span', { class: 'tl-badge', text: 'lease expired' }));
        if (r.worker !== null && r.worker !== undefined) {
          head.appendChild(h('span', { class: 'muted mono break', text: `worker ${r.worker}` }));
        }
        timeline.appendChild(h('li', { class: 'tl-item tl-failed' }, head,
          h('pre', { class: 'code error-text tl-error', text: String(r.error) })));
      }
      const timelineBody = records.length === 0
        ? h('p', { class: 'muted', id: 'history-empty', text: 'No failures recorded.' })
        : timeline;
      const timelineNote = dropped > 0
        ? h('p', { class: 'note', id: 'history-dropped',
                   text: `${plural(dropped, 'older record')} not kept (the last 20 are).` })
        : null;

      // Retry budget: counts and times of the current attempt.
      const hist = h('dl', { class: 'facts' });
      const hfact = (k, v) => { hist.appendChild(h('dt', { text: k })); hist.appendChild(h('dd', null, v)); };
      const left = Math.max(0, (m.max_retries || 0) - (m.retry_count || 0));
      hfact('Failed attempts', h('span', null, h('span', { class: 'mono', text: `${m.retry_count} of ${m.max_retries}` }),
        h('span', { class: 'muted', text: m.status === 'dead' ? '  (no retries left)' : `  (${plural(left, 'retry', 'retries')} left)` })));
      hfact('Next attempt', m.retry_after ? timeEl(m.retry_after, true)
        : h('span', { class: 'muted', text: m.status === 'pending' ? 'as soon as a worker claims it' : '—' }));
      hfact('Lease expires', m.lease_expires_at ? timeEl(m.lease_expires_at, true) : h('span', { class: 'muted', text: '—' }));
      const errBox = m.last_error === null || m.last_error === undefined
        ? h('p', { class: 'muted', text: 'No error recorded.' })
        : h('pre', { class: 'code error-text', id: 'last-error', tabindex: 0, text: m.last_error });

      // Payload: pretty JSON when it parses as an object or array, raw otherwise.
      const raw = typeof m.payload === 'string' ? m.payload : JSON.stringify(m.payload);
      let pretty = null;
      try {
        const v = JSON.parse(raw);
        if (v !== null && typeof v === 'object') pretty = JSON.stringify(v, null, 2);
      } catch (e) { pretty = null; }
      const pre = h('pre', { class: 'code payload-text', id: 'payload', tabindex: 0,
                             'aria-label': 'Payload' });
      const showMode = () => {
        const usePretty = pretty !== null && this.mode === 'pretty';
        pre.textContent = usePretty ? pretty : raw;
        btnPretty.setAttribute('aria-pressed', String(usePretty));
        btnRaw.setAttribute('aria-pressed', String(!usePretty));
      };
      const btnPretty = h('button', { type: 'button', class: 'btn btn-sm seg', text: 'Formatted',
        disabled: pretty === null, onclick: () => { this.mode = 'pretty'; showMode(); } });
      const btnRaw = h('button', { type: 'button', class: 'btn btn-sm seg', text: 'Raw',
        onclick: () => { this.mode = 'raw'; showMode(); } });
      const btnCopy = h('button', { type: 'button', class: 'btn btn-sm btn-ghost', text: 'Copy',
        onclick: async () => {
          try { await navigator.clipboard.writeText(raw); toast('Payload copied.', 'success'); }
          catch (e) { toast('The browser refused the clipboard.', 'error'); }
        } });
      showMode();

      clear(this.body);
      appendKids(this.body, [
        h('div', { class: 'message-grid' },
          h('section', { class: 'panel', 'aria-labelledby': 'm-details' },
            h('h2', { id: 'm-details', text: 'Details' }), dl),
          h('section', { class: 'panel', 'aria-labelledby': 'm-history' },
            h('h2', { id: 'm-history', text: 'Retry budget' }), hist)),
        h('section', { class: 'panel', 'aria-labelledby': 'm-timeline' },
          h('h2', { id: 'm-timeline', text: 'Timeline' }), timelineBody, timelineNote),
        h('section', { class: 'panel', 'aria-labelledby': 'm-error' },
          h('h2', { id: 'm-error', text: 'Last error' }), errBox),
        h('section', { class: 'panel', 'aria-labelledby': 'm-payload' },
          h('div', { class: 'panel-head' },
            h('h2', { id: 'm-payload' }, 'Payload ',
              h('span', { class: 'h-note', text: `${pretty !== null ? 'JSON' : 'text'} · ${plural(utf8Bytes(raw), 'byte')}` })),
            h('div', { class: 'seg-group', role: 'group', 'aria-label': 'Payload view' }, btnPretty, btnRaw, btnCopy)),
          pre),
      ]);
    }

    async replay() {
      try {
        await api('POST', `${messagePath(this.queue, this.id)}/replay`, {});
        toast(`Message ${this.id} replayed: it is pending again.`, 'success');
      } catch (e) { handleError(e); }
      this.sig = null;
      this.load();
    }

    async kill() {
      const ok = await confirmDialog({
        title: `Kill message ${this.id}`,
        message: `Message ${this.id} of queue “${this.queue}” becomes a dead letter now, without further attempts.`,
        count: '1 message will be marked dead.', ok: 'Kill 1 message', reason: true,
      });
      if (!ok) return;
      try {
        await api('POST', `${messagePath(this.queue, this.id)}/kill`, ok.reason ? { reason: ok.reason } : {});
        toast(`Message ${this.id} is dead.`, 'success');
      } catch (e) { handleError(e); }
      this.sig = null;
      this.load();
    }

    async remove() {
      const ok = await confirmDialog({
        title: `Delete message ${this.id}`,
        message: `Message ${this.id} of queue “${this.queue}” is removed for good. This cannot be undone.`,
        count: '1 message will be deleted.', ok: 'Delete 1 message',
      });
      if (!ok) return;
      try {
        await api('DELETE', messagePath(this.queue, this.id));
        toast(`Message ${this.id} deleted.`, 'success');
        location.hash = queueHref(this.queue, { status: this.m ? this.m.status : 'dead' });
      } catch (e) { handleError(e); this.sig = null; this.load(); }
    }
  }

  class NotFoundView {
    start() {
      document.title = 'Not found — retryd';
      appendKids($('#main'), h('div', { class: 'panel empty-panel' },
        h('h1', { text: 'No such page' }),
        h('p', null, h('a', { href: '#/queues', text: 'Go to the queues' }))));
    }
  }

  // A queue's fairness groups: ui/groups.js's view, given the helpers here.
  let GroupsViewClass = null;
  function groupsView() {
    if (!GroupsViewClass) {
      if (typeof window.retrydGroupsView !== 'function') return NotFoundView;
      GroupsViewClass = window.retrydGroupsView({ h, appendKids, clear, setText, api, ApiError,
        queuePath, queueHref, breadcrumb, emptyRow, errorNote, handleError, markUpdated, fmtInt, enc });
    }
    return GroupsViewClass;
  }

  // -------------------------------------------------------------------------
  // Router
  // -------------------------------------------------------------------------
  function parseRoute() {
    let raw = location.hash.replace(/^#/, '');
    if (!raw || raw === '/') raw = '/queues';
    const qi = raw.indexOf('?');
    const path = qi >= 0 ? raw.slice(0, qi) : raw;
    const params = new URLSearchParams(qi >= 0 ? raw.slice(qi + 1) : '');
    const parts = path.split('/').filter((p) => p !== '');
    let dec;
    try { dec = parts.map(decodeURIComponent); } catch (e) { return { name: 'notfound' }; }
    if (dec[0] !== 'queues') return { name: 'notfound' };
    if (dec.length === 1) return { name: 'overview' };
    if (dec.length === 2) return { name: 'queue', queue: dec[1], params };
    if (dec.length === 3 && dec[2] === 'groups') return { name: 'groups', queue: dec[1], params };
    if (dec.length === 4 && dec[2] === 'messages' && /^[1-9][0-9]*$/.test(dec[3])) {
      return { name: 'message', queue: dec[1], id: dec[3], params };
    }
    return { name: 'notfound' };
  }

  function route(moveFocus) {
    const r = parseRoute();
    window.retrydRoles.refresh(getToken()); // roles.js: hide what the token may not do
    if (view && view instanceof QueueView && r.name === 'queue' && r.queue === view.queue) {
      view.update(r);
      return;
    }
    destroyView();
    document.body.classList.remove('signed-out');
    const main = clear($('#main'));
    setText($('#updated-at'), '');
    const V = r.name === 'overview' ? OverviewView : r.name === 'queue' ? QueueView
      : r.name === 'message' ? MessageView : r.name === 'groups' ? groupsView() : NotFoundView;
    view = new V();
    view.start(r);
    if (moveFocus) main.focus({ preventScroll: true });
    window.scrollTo(0, 0);
  }

  // -------------------------------------------------------------------------
  // Start
  // -------------------------------------------------------------------------
  function init() {
    const auto = $('#auto-refresh');
    try { auto.checked = sessionStorage.getItem(REFRESH_KEY) !== 'off'; } catch (e) { /* default on */ }
    auto.addEventListener('change', () => {
      try { sessionStorage.setItem(REFRESH_KEY, auto.checked ? 'on' : 'off'); } catch (e) { /* ignore */ }
    });
    $('#sign-out').addEventListener('click', () => {
      setToken('');
      showLogin('');
    });
    $('#skip-link').addEventListener('click', () => $('#main').focus());
    setToken(getToken());

    window.addEventListener('hashchange', () => route(true));
    document.addEventListener('keydown', (e) => {
      if (e.key !== '/' || e.ctrlKey || e.metaKey || e.altKey) return;
      const t = e.target;
      if (t && (t.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(t.tagName))) return;
      if (document.querySelector('dialog[open]')) return;
      const input = $('#filter-error');
      if (input) { e.preventDefault(); input.focus(); input.select(); }
    });
    // Auto-refresh: counts and the current message every REFRESH_MS; while the
    // banner is up, keep retrying even when auto-refresh is off.
    setInterval(() => {
      if (document.hidden || !view || !view.refresh) return;
      if (document.querySelector('dialog[open]')) return;
      if (auto.checked || bannerKind) view.refresh();
    }, REFRESH_MS);
    route(false);
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', init);
  else init();
}());
