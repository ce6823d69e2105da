// http_worker.mjs - the worker loop of `make bench` written as an ordinary
// application would write it: node's own http module, a keep-alive agent
// with one socket per worker, JSON.stringify / JSON.parse. It runs
// the same loops as build/loadgen (work: claim -> succeed, two requests per
// message; settle: settle-and-claim, one request per message) so that the
// bench can show how much of retryd's figure depends on how cheap its client
// is: BullMQ's worker runs inside BullMQ's own process, loadgen is a C
// program that costs a few microseconds per message. Built-in modules only.
//
//   node bench/http_worker.mjs --port P --queue Q --conns W --messages N --mode work|settle
//
// Prints one line that scripts/bench.sh reads:
//   mode=M conns=W messages=N seconds=S msgs_per_s=R requests=Q cpu_us=C
// cpu_us is this process's CPU (process.cpuUsage) during the timed loop. A
// claim that finds nothing is repeated as a long-poll claim (wait_seconds 1);
// any other unexpected answer ends the run with exit status 1.
import http from 'node:http';

function parseArgs(argv) {
  const o = { port: 0, queue: 'bench', conns: 1, messages: 1000, mode: 'work' };
  for (let i = 2; i < argv.length; i += 2) {
    const [k, v] = [argv[i], argv[i + 1]];
    if (k === '--port') o.port = Number(v);
    else if (k === '--queue') o.queue = v;
    else if (k === '--conns') o.conns = Number(v);
    else if (k === '--messages') o.messages = Number(v);
    else if (k === '--mode') o.mode = v;
    else throw new Error(`unknown option ${k}`);
  }
  if (!o.port || !['work', 'settle'].includes(o.mode)) throw new Error('usage: see the header');
  return o;
}

const opts = parseArgs(process.argv);
const agent = new http.Agent({ keepAlive: true, maxSockets: opts.conns });
const claimPath = `/queues/${encodeURIComponent(opts.queue)}/claim`;
let requests = 0;
let done = 0;
let finished;
// The clock stops when the last message is settled, as loadgen's does; a
// worker still waiting in a long-poll then is not waited for.
const allDone = new Promise((resolve) => { finished = resolve; });
function messageDone() {
  done += 1;
  if (done === opts.messages) finished(process.hrtime.bigint());
}

function post(path, body) {
  return new Promise((resolve, reject) => {
    const data = JSON.stringify(body);
    requests += 1;
    const req = http.request({
      host: '127.0.0.1', port: opts.port, path, method: 'POST', agent,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) },
    }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => { text += chunk; });
      res.on('end', () => resolve({ status: res.statusCode, body: text }));
    });
    req.on('error', reject);
    req.end(data);
  });
}

function expect(r, status, what) {
  if (r.status !== status) throw new Error(`${what} answered ${r.status}: ${r.body.slice(0, 300)}`);
  return r.status === 204 ? null : JSON.parse(r.body);
}

// claim -> succeed, one message per claim.
async function workLoop() {
  let wait = false;
  while (done < opts.messages) {
    const r = await post(claimPath, wait ? { wait_seconds: 1 } : {});
    wait = r.status === 204;
    if (wait) continue;
    const m = expect(r, 200, 'claim');
    const path = `/queues/${encodeURIComponent(opts.queue)}/messages/${m.id}/succeed`;
    const s = expect(await post(path, { lease_token: m.lease_token }), 200, 'succeed');
    if (s.status !== 'succeeded') throw new Error(`succeed left ${s.status}`);
    messageDone();
  }
}

// settle-and-claim: each request settles the message held and claims the next.
async function settleLoop() {
  let held = null;
  let wait = false;
  while (done < opts.messages) {
    const body = { count: 1 };
    if (held) body.settle = [{ id: held.id, lease_token: held.lease_token, outcome: 'succeeded' }];
    else if (wait) body.wait_seconds = 1;
    const r = await post(claimPath, body);
    if (held) {
      const d = expect(r, 200, 'settle-and-claim');
      if (d.settled.length !== 1 || d.settled[0].status !== 'succeeded') {
        throw new Error(`settle-and-claim settled ${JSON.stringify(d.settled)}`);
      }
      messageDone();
      held = d.messages[0] || null;
    } else {
      held = r.status === 204 ? null : expect(r, 200, 'claim').messages[0] || null;
    }
    wait = held === null;
  }
}

async function main() {
  const loop = opts.mode === 'work' ? workLoop : settleLoop;
  const cpu0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  let failed = null;
  for (let i = 0; i < opts.conns; i++) loop().catch((err) => { failed = err; finished(0n); });
  const t1 = await allDone;
  if (failed) throw failed;
  const secs = Number(t1 - t0) / 1e9;
  const cpu = process.cpuUsage(cpu0);
  console.log(`mode=${opts.mode} conns=${opts.conns} messages=${done} seconds=${secs.toFixed(3)} ` +
              `msgs_per_s=${(done / secs).toFixed(1)} requests=${requests} ` +
              `cpu_us=${cpu.user + cpu.system}`);
  agent.destroy();
}

main().then(() => process.exit(0), (err) => {
  console.error(`http_worker: ${err && err.message ? err.message : err}`);
  process.exit(1);
});
