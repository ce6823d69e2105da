#!/usr/bin/env node
// worker.mjs - a complete retryd worker for Node 18+ (global fetch, no packages).
//
//   RETRYD_URL=http://127.0.0.1:8080 QUEUE=jobs node worker.mjs
//
// Loop: POST /queues/{q}/claim with the settlements of what it finished and a
// long-poll (docs/reference.md "Settle and claim": settle and take the next in one atomic call). Jobs follow
// a tiny convention: the payload is JSON {"work": "ok" | "slow" | "permanent"};
// "slow" works longer than a lease and extends it meanwhile, "permanent" fails
// with retryable: false (dead at once, no retries); anything that throws is a
// retryable failure (backoff, then dead). On SIGTERM or SIGINT it takes nothing
// new, finishes what it holds and settles it, then exits 0. A 503 (Redis
// unreachable) or a refused connection backs off (Retry-After, doubling to 30 s).
//
// Environment: RETRYD_URL, QUEUE (jobs), RETRYD_TOKEN (bearer, when the daemon
// has --auth-token-file), WORKER (a name: host/pid), LEASE_SECONDS (30),
// WAIT_SECONDS (20), SLOW_SECONDS (how long a "slow" job works, 3 x LEASE_SECONDS).
import { hostname } from 'node:os';
import { setTimeout as sleep } from 'node:timers/promises';

const env = process.env;
const URL_ = (env.RETRYD_URL || 'http://127.0.0.1:8080').replace(/\/+$/, '');
const Q = `${URL_}/queues/${encodeURIComponent(env.QUEUE || 'jobs')}`;
const NAME = env.WORKER || `${hostname()}/${process.pid}`;
const LEASE = Number(env.LEASE_SECONDS || 30);
const WAIT = Number(env.WAIT_SECONDS || 20);
const SLOW = Number(env.SLOW_SECONDS || 3 * LEASE);
let stopping = false;

const log = (...args) => console.error(`worker.mjs[${NAME}]:`, ...args);
// The call in progress finishes; nothing new is claimed.
for (const sig of ['SIGTERM', 'SIGINT']) process.on(sig, () => { stopping = true; });

class Unavailable extends Error {
  constructor(why, retryAfter) { super(why); this.retryAfter = retryAfter; }
}

// POST body to path: {status, answer}. 503 or no connection: throws Unavailable.
async function call(path, body) {
  const headers = { 'Content-Type': 'application/json' };
  if (env.RETRYD_TOKEN) headers.Authorization = `Bearer ${env.RETRYD_TOKEN}`;
  let res;
  try {
    res = await fetch(Q + path, { method: 'POST', headers, body: JSON.stringify(body),
                                  signal: AbortSignal.timeout((WAIT + 30) * 1000) });
  } catch (e) {
    throw new Unavailable(String(e.cause || e), 1);
  }
  const text = await res.text();
  if (res.status === 503) throw new Unavailable(text, Number(res.headers.get('Retry-After')) || 1);
  return { status: res.status, answer: text ? JSON.parse(text) : null };
}

// Extends msg's lease; false when the lease is lost (it expired and was taken).
async function extend(msg) {
  try {
    const { status } = await call(`/messages/${msg.id}/extend`,
                                  { lease_token: msg.lease_token, lease_seconds: LEASE });
    return status === 200;
  } catch (e) {
    if (e instanceof Unavailable) return true; // the lease may still hold: try again later
    throw e;
  }
}

// Does the job; returns its settlement {id, lease_token, outcome, ...} or null.
async function work(msg) {
  const s = { id: msg.id, lease_token: msg.lease_token, outcome: 'succeeded' };
  let kind;
  try { kind = JSON.parse(msg.payload).work; } catch { kind = undefined; }
  try {
    if (kind === 'slow') { // a job that outlives its lease extends it
      const deadline = Date.now() + SLOW * 1000;
      let renew = Date.now() + (LEASE * 1000) / 2;
      while (Date.now() < deadline) {
        await sleep(Math.min(200, Math.max(0, deadline - Date.now())));
        if (Date.now() >= renew) {
          if (!(await extend(msg))) { log('lost the lease of', msg.id, '- dropping it'); return null; }
          renew = Date.now() + (LEASE * 1000) / 2;
        }
      }
    } else if (kind !== 'ok') { // a permanent error: no retry will help, dead at once
      Object.assign(s, { outcome: 'failed', retryable: false, error: `permanent: cannot do ${JSON.stringify(kind)}` });
    }
  } catch (e) { // anything else is worth a retry (backoff, then dead)
    Object.assign(s, { outcome: 'failed', error: `${e.name}: ${e.message}` });
  }
  return s;
}

// Settles s with its own route (on the way out, when no claim follows).
async function settleAlone(s) {
  const { id, outcome, ...body } = s;
  for (;;) {
    try {
      const { status, answer } = await call(`/messages/${id}/${outcome === 'succeeded' ? 'succeed' : 'fail'}`, body);
      log('settled', id, 'on the way out:', status, answer && answer.status);
      return;
    } catch (e) {
      if (!(e instanceof Unavailable)) throw e;
      log('503 while settling', id, '- retrying in', e.retryAfter, 's');
      await sleep(e.retryAfter * 1000);
    }
  }
}

async function main() {
  let done = [];
  let backoff = 1;
  log('working on', Q);
  while (!stopping) {
    // `worker` names this worker; a retryd that does not record it yet ignores it
    // (unknown fields are ignored).
    const body = { worker: NAME, count: 1, lease_seconds: LEASE, wait_seconds: WAIT };
    if (done.length) body.settle = done;
    let status, answer;
    try {
      ({ status, answer } = await call('/claim', body));
    } catch (e) { // nothing was done (or, outcome-unknown, maybe): try again
      if (!(e instanceof Unavailable)) throw e;
      const wait = Math.max(e.retryAfter, backoff);
      log('retryd unavailable, backing off', wait, 's:', e.message.slice(0, 120));
      await sleep(wait * 1000);
      backoff = Math.min(backoff * 2, 30);
      continue;
    }
    backoff = 1;
    if (status !== 200 && status !== 204) { log('claim refused:', status, answer); return 1; }
    for (const item of (answer && answer.settled) || []) {
      if (!['succeeded', 'pending', 'dead'].includes(item.status)) log('settling', item.id, 'answered', item.status);
    }
    done = [];
    for (const m of (answer && answer.messages) || []) {
      const s = await work(m);
      if (s) done.push(s);
    }
  }
  for (const s of done) await settleAlone(s);
  log('stopped');
  return 0;
}

process.exitCode = await main();
