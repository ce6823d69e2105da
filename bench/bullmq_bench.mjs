// bullmq_bench.mjs - the BullMQ peer of `make bench`: the same
// lifecycle retryd is measured on (add, then a worker takes and completes
// each job), on the same redis-server, with BullMQ's defaults (completed jobs
// are kept, as retryd keeps succeeded messages). Prints key=value lines that
// scripts/bench.sh reads:
//
//   node bench/bullmq_bench.mjs --port P [--jobs N] [--payload-bytes B]
//                               [--concurrency 1,10,50|none] [--worker-jobs N1,N2,N3]
//                               [--add-inflight K]
//
//   bullmq version=V
//   add jobs=N seconds=S jobs_per_s=R redis_cpu_us_per_job=C bytes_per_job=M node_cpu_us_per_job=P
//   add_one jobs=N inflight=K seconds=S jobs_per_s=R redis_cpu_us_per_job=C node_cpu_us_per_job=P
//   worker concurrency=C jobs=N seconds=S jobs_per_s=R redis_cpu_us_per_job=U
//          add_redis_cpu_us_per_job=A node_cpu_us_per_job=P
//
// "add" is addBulk of N jobs (chunks of 1000) into an empty queue, with the
// Redis memory it took per waiting job (INFO used_memory delta / N). Each
// "worker" line adds its jobs first (addBulk, measured apart) and then times
// a Worker whose processor returns at once, from its creation until the last
// job completed. Redis CPU is INFO used_cpu_user + used_cpu_sys deltas; node's
// own CPU (this process: BullMQ, ioredis, the processor) is process.cpuUsage().
// --add-inflight K measures only "add_one": queue.add of one job a call,
// K calls in flight at a time on the one Queue (as a web server's request
// handlers share one), N jobs into an emptied queue.
import { readFileSync } from 'node:fs';
import { Queue, Worker } from 'bullmq';
import IORedis from 'ioredis';

function parseArgs(argv) {
  const o = { port: 0, jobs: 20000, payloadBytes: 100, concurrency: [1, 10, 50], workerJobs: [],
             addInflight: 0 };
  for (let i = 2; i < argv.length; i += 2) {
    const [k, v] = [argv[i], argv[i + 1]];
    if (k === '--port') o.port = Number(v);
    else if (k === '--jobs') o.jobs = Number(v);
    else if (k === '--payload-bytes') o.payloadBytes = Number(v);
    else if (k === '--concurrency') o.concurrency = v === 'none' ? [] : v.split(',').map(Number);
    else if (k === '--worker-jobs') o.workerJobs = v.split(',').map(Number);
    else if (k === '--add-inflight') o.addInflight = Number(v);
    else throw new Error(`unknown option ${k}`);
  }
  if (!o.port) throw new Error('--port is required');
  return o;
}

const opts = parseArgs(process.argv);
const connection = { host: '127.0.0.1', port: opts.port, maxRetriesPerRequest: null };
const admin = new IORedis(connection);
const QUEUE = 'bench-bullmq';

async function info(section, field) {
  const text = await admin.info(section);
  const m = text.match(new RegExp(`^${field}:([0-9.]+)`, 'm'));
  return m ? Number(m[1]) : NaN;
}

async function redisCpuUs() {
  return ((await info('cpu', 'used_cpu_user')) + (await info('cpu', 'used_cpu_sys'))) * 1e6;
}

const payload = 'abcdefghijklmnopqrstuvwxyz0123456789'.repeat(Math.ceil(opts.payloadBytes / 36))
  .slice(0, opts.payloadBytes);

// addBulk of n jobs into an emptied queue; returns what it measured.
async function addJobs(queue, n) {
  await queue.obliterate({ force: true });
  const mem0 = await info('memory', 'used_memory');
  const cpu0 = await redisCpuUs();
  const node0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  for (let done = 0; done < n; done += 1000) {
    const batch = [];
    for (let i = done; i < Math.min(n, done + 1000); i++) batch.push({ name: 'j', data: payload });
    await queue.addBulk(batch);
  }
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  const node = process.cpuUsage(node0);
  const cpu = (await redisCpuUs()) - cpu0;
  const mem = (await info('memory', 'used_memory')) - mem0;
  return { secs, cpuPerJob: cpu / n, bytesPerJob: mem / n, nodePerJob: (node.user + node.system) / n };
}

// queue.add of n jobs, one a call, k calls in flight, into an emptied queue.
async function addOne(queue, n, k) {
  await queue.obliterate({ force: true });
  const cpu0 = await redisCpuUs();
  const node0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  let issued = 0;
  async function lane() {
    while (issued < n) {
      issued += 1;
      await queue.add('j', payload);
    }
  }
  await Promise.all(Array.from({ length: Math.min(k, n) }, lane));
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  const node = process.cpuUsage(node0);
  const cpu = (await redisCpuUs()) - cpu0;
  const waiting = await queue.getWaitingCount();
  if (waiting !== n) throw new Error(`add_one: ${waiting} jobs waiting after ${n} adds`);
  return { secs, cpuPerJob: cpu / n, nodePerJob: (node.user + node.system) / n };
}

// A Worker with this concurrency completes n waiting jobs.
async function work(concurrency, n) {
  const cpu0 = await redisCpuUs();
  const node0 = process.cpuUsage();
  const t0 = process.hrtime.bigint();
  let completed = 0;
  let finished;
  const allDone = new Promise((resolve) => { finished = resolve; });
  const worker = new Worker(QUEUE, async () => null, { connection, concurrency });
  worker.on('completed', () => {
    completed += 1;
    if (completed === n) finished();
  });
  worker.on('error', (err) => { console.error(`bullmq worker error: ${err.message}`); });
  await allDone;
  const secs = Number(process.hrtime.bigint() - t0) / 1e9;
  const node = process.cpuUsage(node0);
  const cpu = (await redisCpuUs()) - cpu0;
  await worker.close();
  return { secs, cpuPerJob: cpu / n, nodePerJob: (node.user + node.system) / n };
}

async function main() {
  const pkg = JSON.parse(readFileSync(new URL('./node_modules/bullmq/package.json', import.meta.url)));
  console.log(`bullmq version=${pkg.version}`);
  const queue = new Queue(QUEUE, { connection });
  await queue.waitUntilReady();

  if (opts.addInflight > 0) {
    const a = await addOne(queue, opts.jobs, opts.addInflight);
    console.log(`add_one jobs=${opts.jobs} inflight=${opts.addInflight} seconds=${a.secs.toFixed(3)} ` +
                `jobs_per_s=${(opts.jobs / a.secs).toFixed(1)} ` +
                `redis_cpu_us_per_job=${a.cpuPerJob.toFixed(2)} node_cpu_us_per_job=${a.nodePerJob.toFixed(2)}`);
    await queue.obliterate({ force: true });
    await queue.close();
    await admin.quit();
    return;
  }

  const add = await addJobs(queue, opts.jobs);
  console.log(`add jobs=${opts.jobs} seconds=${add.secs.toFixed(3)} ` +
              `jobs_per_s=${(opts.jobs / add.secs).toFixed(1)} ` +
              `redis_cpu_us_per_job=${add.cpuPerJob.toFixed(2)} bytes_per_job=${add.bytesPerJob.toFixed(1)} ` +
              `node_cpu_us_per_job=${add.nodePerJob.toFixed(2)}`);

  for (let i = 0; i < opts.concurrency.length; i++) {
    const c = opts.concurrency[i];
    const n = opts.workerJobs[i] || opts.jobs;
    const added = await addJobs(queue, n);
    const w = await work(c, n);
    const counts = await queue.getJobCounts('completed', 'waiting', 'active', 'failed');
    if (counts.completed !== n) {
      throw new Error(`concurrency ${c}: ${JSON.stringify(counts)} after ${n} completions`);
    }
    console.log(`worker concurrency=${c} jobs=${n} seconds=${w.secs.toFixed(3)} ` +
                `jobs_per_s=${(n / w.secs).toFixed(1)} redis_cpu_us_per_job=${w.cpuPerJob.toFixed(2)} ` +
                `add_redis_cpu_us_per_job=${added.cpuPerJob.toFixed(2)} ` +
                `node_cpu_us_per_job=${w.nodePerJob.toFixed(2)}`);
  }
  await queue.obliterate({ force: true });
  await queue.close();
  await admin.quit();
}

main().then(() => process.exit(0), (err) => {
  console.error(`bullmq bench failed: ${err && err.message ? err.message : err}`);
  process.exit(1);
});
