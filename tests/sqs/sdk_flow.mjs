// sdk_flow.mjs ENDPOINT CASE - npm's @aws-sdk/client-sqs 3.x (the JSON
// protocol) and sqs-consumer driving retryd's SQS endpoint, as their users
// write them. The SDK verifies MD5OfMessageBody and MD5OfMessageAttributes
// itself (its md5 option is on by default): a wrong digest fails the call.
// Exits non-zero with a message on the first thing that is not as SQS
// documents it.
import {
  SQSClient, CreateQueueCommand, GetQueueUrlCommand, SendMessageCommand,
  SendMessageBatchCommand, ReceiveMessageCommand, DeleteMessageCommand,
  DeleteMessageBatchCommand, ChangeMessageVisibilityCommand, GetQueueAttributesCommand,
  ListQueuesCommand, QueueDoesNotExist, StartMessageMoveTaskCommand, ListMessageMoveTasksCommand,
  CancelMessageMoveTaskCommand,
} from '@aws-sdk/client-sqs';
import { Consumer } from 'sqs-consumer';

const [endpoint, kase, keyId = 'test', secret = 'test'] = process.argv.slice(2);
const client = new SQSClient({
  endpoint, region: 'us-east-1', credentials: { accessKeyId: keyId, secretAccessKey: secret },
});
const run = Math.random().toString(16).slice(2, 10);

function check(cond, what) {
  if (!cond) {
    console.log('FAIL:', what);
    process.exit(1);
  }
}

async function basic() {
  const { QueueUrl } = await client.send(new CreateQueueCommand({ QueueName: `sdk-${run}` }));
  const got = await client.send(new GetQueueUrlCommand({ QueueName: `sdk-${run}` }));
  check(got.QueueUrl === QueueUrl, `GetQueueUrl ${got.QueueUrl}`);
  const attrs = {
    s: { DataType: 'String', StringValue: 'v\u00e9\u4e2d' },
    n: { DataType: 'Number', StringValue: '42' },
    b: { DataType: 'Binary', BinaryValue: new Uint8Array([0, 1, 2, 255]) },
    c: { DataType: 'Number.int', StringValue: '7' },
  };
  // The SDK checks both MD5s of the answer; a mismatch throws.
  const sent = await client.send(new SendMessageCommand({
    QueueUrl, MessageBody: 'from node \u{1F600}', MessageAttributes: attrs,
  }));
  check(sent.MessageId && sent.MD5OfMessageAttributes, `send ${JSON.stringify(sent)}`);
  const batch = await client.send(new SendMessageBatchCommand({
    QueueUrl,
    Entries: [1, 2, 3].map((i) => ({ Id: `b${i}`, MessageBody: `batch ${i}`,
      MessageAttributes: { i: { DataType: 'Number', StringValue: String(i) } } })),
  }));
  check(batch.Successful.length === 3 && !(batch.Failed || []).length, `batch ${JSON.stringify(batch)}`);
  const seen = [];
  while (seen.length < 4) {
    const r = await client.send(new ReceiveMessageCommand({
      QueueUrl, MaxNumberOfMessages: 10, MessageAttributeNames: ['All'],
      MessageSystemAttributeNames: ['All'], WaitTimeSeconds: 1,
    }));
    check(r.Messages && r.Messages.length, `receive after ${seen.length}`);
    seen.push(...r.Messages);
  }
  const first = seen.find((m) => m.MessageId === sent.MessageId);
  check(first && first.Body === 'from node \u{1F600}', 'the first message');
  check(Buffer.from(first.MessageAttributes.b.BinaryValue).equals(Buffer.from([0, 1, 2, 255])),
    'binary attribute');
  check(first.MessageAttributes.c.DataType === 'Number.int', 'custom type');
  check(first.Attributes.ApproximateReceiveCount === '1', 'receive count');
  await client.send(new ChangeMessageVisibilityCommand({
    QueueUrl, ReceiptHandle: first.ReceiptHandle, VisibilityTimeout: 600,
  }));
  const del = await client.send(new DeleteMessageBatchCommand({
    QueueUrl, Entries: seen.map((m, i) => ({ Id: `d${i}`, ReceiptHandle: m.ReceiptHandle })),
  }));
  check(del.Successful.length === 4, `delete batch ${JSON.stringify(del)}`);
  const a = await client.send(new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ['All'] }));
  check(a.Attributes.ApproximateNumberOfMessages === '0'
    && a.Attributes.ApproximateNumberOfMessagesNotVisible === '0', `attributes ${JSON.stringify(a)}`);
  const l = await client.send(new ListQueuesCommand({ QueueNamePrefix: `sdk-${run}` }));
  check(l.QueueUrls.length === 1 && l.QueueUrls[0] === QueueUrl, `list ${JSON.stringify(l)}`);
  try {
    await client.send(new GetQueueUrlCommand({ QueueName: `missing-${run}` }));
    check(false, 'GetQueueUrl of a missing queue succeeded');
  } catch (e) {
    check(e instanceof QueueDoesNotExist || e.name === 'QueueDoesNotExist'
      || e.name === 'AWS.SimpleQueueService.NonExistentQueue', `missing queue: ${e.name}`);
    check(e.$metadata.httpStatusCode === 400, `status ${e.$metadata.httpStatusCode}`);
  }
  try {
    await client.send(new DeleteMessageCommand({ QueueUrl, ReceiptHandle: 'nope' }));
    check(false, 'a bad receipt handle was accepted');
  } catch (e) {
    check(e.name === 'ReceiptHandleIsInvalid', `bad handle: ${e.name}`);
  }
}

// sqs-consumer: a handler that throws leaves the message to come back when
// its visibility runs out; after maxReceiveCount receives it moves to the
// dead-letter queue. The others are deleted by the consumer.
async function consumer() {
  const dlq = (await client.send(new CreateQueueCommand({ QueueName: `cdlq-${run}` }))).QueueUrl;
  const arn = (await client.send(new GetQueueAttributesCommand({
    QueueUrl: dlq, AttributeNames: ['QueueArn'] }))).Attributes.QueueArn;
  const { QueueUrl } = await client.send(new CreateQueueCommand({
    QueueName: `cons-${run}`,
    Attributes: { VisibilityTimeout: '1',
      RedrivePolicy: JSON.stringify({ deadLetterTargetArn: arn, maxReceiveCount: 3 }) },
  }));
  for (let i = 0; i < 20; i++) {
    await client.send(new SendMessageCommand({ QueueUrl, MessageBody: i === 7 ? 'poison' : `job ${i}` }));
  }
  const done = new Set();
  let poisonSeen = 0;
  const c = Consumer.create({
    queueUrl: QueueUrl, sqs: client, batchSize: 5, waitTimeSeconds: 1,
    attributeNames: ['ApproximateReceiveCount'],
    handleMessage: async (m) => {
      if (m.Body === 'poison') {
        poisonSeen++;
        throw new Error('cannot process');
      }
      done.add(m.Body);
      return m;
    },
  });
  c.on('error', (e) => console.log('consumer error:', e.message));
  c.start();
  const deadline = Date.now() + 40000;
  let dead = null;
  while (Date.now() < deadline) {
    await new Promise((res) => setTimeout(res, 500));
    const r = await client.send(new ReceiveMessageCommand({ QueueUrl: dlq, WaitTimeSeconds: 0 }));
    if (r.Messages && r.Messages.length) {
      dead = r.Messages[0];
      if (done.size === 19) break;
    }
  }
  c.stop();
  check(done.size === 19, `handled ${done.size} of 19`);
  check(dead && dead.Body === 'poison', 'the poison message reached the dead-letter queue');
  check(poisonSeen === 3, `the poison message was received ${poisonSeen} times, maxReceiveCount 3`);
  const a = await client.send(new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ['All'] }));
  check(a.Attributes.ApproximateNumberOfMessages === '0'
    && a.Attributes.ApproximateNumberOfMessagesNotVisible === '0', `left ${JSON.stringify(a.Attributes)}`);
}

const sleep = (ms) => new Promise((res) => setTimeout(res, ms));

// The SQS error of a call that must fail: its name (the JSON protocol's
// __type, as the SDK maps it) and message.
async function refused(cmd) {
  try {
    await client.send(cmd);
  } catch (e) {
    return { name: e.name, message: e.message, status: e.$metadata && e.$metadata.httpStatusCode };
  }
  return null;
}

// Dead letters: n messages received once and released (maxReceiveCount 1)
// land in the dead-letter queue; returns when it holds all of them.
async function deadLetters(src, dlq, n, prefix) {
  for (let i = 0; i < n; i += 10) {
    await client.send(new SendMessageBatchCommand({
      QueueUrl: src,
      Entries: Array.from({ length: Math.min(10, n - i) }, (_, j) => ({
        Id: `m${i + j}`, MessageBody: `${prefix} ${i + j}`,
        MessageAttributes: { k: { DataType: 'String', StringValue: `v${i + j}` } } })),
    }));
  }
  let released = 0;
  while (released < n) {
    const r = await client.send(new ReceiveMessageCommand({ QueueUrl: src, MaxNumberOfMessages: 10 }));
    for (const m of r.Messages || []) {
      await client.send(new ChangeMessageVisibilityCommand({
        QueueUrl: src, ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0 }));
      released++;
    }
  }
  const deadline = Date.now() + 20000;
  while (Date.now() < deadline) {
    const a = await client.send(new GetQueueAttributesCommand({
      QueueUrl: dlq, AttributeNames: ['ApproximateNumberOfMessages'] }));
    if (Number(a.Attributes.ApproximateNumberOfMessages) === n) return;
    await sleep(100);
  }
  check(false, `${n} dead letters never reached the dead-letter queue`);
}

async function count(url) {
  const a = await client.send(new GetQueueAttributesCommand({
    QueueUrl: url, AttributeNames: ['ApproximateNumberOfMessages'] }));
  return Number(a.Attributes.ApproximateNumberOfMessages);
}

async function tasks(SourceArn, MaxResults = 10) {
  return (await client.send(new ListMessageMoveTasksCommand({ SourceArn, MaxResults }))).Results || [];
}

async function moves() {
  const arnOf = async (QueueUrl) => (await client.send(new GetQueueAttributesCommand({
    QueueUrl, AttributeNames: ['QueueArn'] }))).Attributes.QueueArn;
  const dlq = (await client.send(new CreateQueueCommand({ QueueName: `mdlq-${run}` }))).QueueUrl;
  const dlqArn = await arnOf(dlq);
  const src = (await client.send(new CreateQueueCommand({
    QueueName: `msrc-${run}`,
    Attributes: { RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlqArn, maxReceiveCount: 1 }) },
  }))).QueueUrl;
  const srcArn = await arnOf(src);

  // Refusals, as SQS answers them.
  let e = await refused(new StartMessageMoveTaskCommand({ SourceArn: srcArn }));
  check(e && e.name === 'InvalidParameterValue' && /Dead Letter Queue/.test(e.message),
    `a source that is not a dead-letter queue: ${JSON.stringify(e)}`);
  e = await refused(new StartMessageMoveTaskCommand({ SourceArn: `${dlqArn}-nope` }));
  check(e && e.name === 'ResourceNotFoundException', `an unknown source: ${JSON.stringify(e)}`);
  e = await refused(new StartMessageMoveTaskCommand({ SourceArn: dlqArn, DestinationArn: `${srcArn}-nope` }));
  check(e && e.name === 'ResourceNotFoundException' && /DestinationArn/.test(e.message),
    `an unknown destination: ${JSON.stringify(e)}`);
  e = await refused(new StartMessageMoveTaskCommand({ SourceArn: dlqArn, MaxNumberOfMessagesPerSecond: 501 }));
  check(e && e.name === 'InvalidParameterValue', `a rate of 501: ${JSON.stringify(e)}`);
  e = await refused(new CancelMessageMoveTaskCommand({ TaskHandle: 'not a handle' }));
  check(e && e.name === 'InvalidParameterValue', `a bad handle: ${JSON.stringify(e)}`);
  check((await tasks(dlqArn)).length === 0, 'no task yet');

  // A task back to the source: every letter moves, once, with its attributes.
  await deadLetters(src, dlq, 25, 'first');
  const { TaskHandle } = await client.send(new StartMessageMoveTaskCommand({ SourceArn: dlqArn }));
  check(typeof TaskHandle === 'string' && TaskHandle.length > 0, 'a TaskHandle');
  let t = (await tasks(dlqArn, 1))[0];
  check(t && ['RUNNING', 'COMPLETED'].includes(t.Status) && t.SourceArn === dlqArn
    && t.ApproximateNumberOfMessagesToMove === 25 && t.DestinationArn === undefined
    && t.MaxNumberOfMessagesPerSecond === undefined && t.StartedTimestamp > Date.now() - 60000,
    `the task while it runs: ${JSON.stringify(t)}`);
  const deadline = Date.now() + 20000;
  while (Date.now() < deadline && t.Status !== 'COMPLETED') {
    await sleep(100);
    t = (await tasks(dlqArn, 1))[0];
  }
  check(t.Status === 'COMPLETED' && t.ApproximateNumberOfMessagesMoved === 25 && !t.TaskHandle,
    `the task at its end: ${JSON.stringify(t)}`);
  check(await count(dlq) === 0, 'the dead-letter queue is empty');
  const back = new Map();
  while (back.size < 25) {
    const r = await client.send(new ReceiveMessageCommand({
      QueueUrl: src, MaxNumberOfMessages: 10, MessageAttributeNames: ['All'], WaitTimeSeconds: 1 }));
    check(r.Messages && r.Messages.length, `back in the source: ${back.size} of 25`);
    for (const m of r.Messages) {
      check(!back.has(m.Body), `moved twice: ${m.Body}`);
      const i = m.Body.split(' ')[1];
      check(m.MessageAttributes.k.StringValue === `v${i}`, `the attributes of ${m.Body}`);
      back.set(m.Body, m);
    }
  }
  // Received once more without a delete: maxReceiveCount applies again.
  for (const m of back.values()) {
    await client.send(new ChangeMessageVisibilityCommand({
      QueueUrl: src, ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0 }));
  }
  const again = Date.now() + 20000;
  while (Date.now() < again && await count(dlq) < 25) await sleep(100);
  check(await count(dlq) === 25, 'the moved messages died again into the dead-letter queue');

  // A slow task (1 a second) is cancelled: it stops moving; a second start
  // while it runs is refused.
  const dest = (await client.send(new CreateQueueCommand({ QueueName: `mdst-${run}` }))).QueueUrl;
  const slow = await client.send(new StartMessageMoveTaskCommand({
    SourceArn: dlqArn, DestinationArn: await arnOf(dest), MaxNumberOfMessagesPerSecond: 1 }));
  e = await refused(new StartMessageMoveTaskCommand({ SourceArn: dlqArn }));
  check(e && e.name === 'InvalidParameterValue' && /already a task running/.test(e.message),
    `a second task: ${JSON.stringify(e)}`);
  await sleep(1500);
  t = (await tasks(dlqArn, 1))[0];
  check(t.Status === 'RUNNING' && t.TaskHandle === slow.TaskHandle && t.MaxNumberOfMessagesPerSecond === 1
    && t.DestinationArn === await arnOf(dest) && t.ApproximateNumberOfMessagesMoved <= 3,
    `the slow task: ${JSON.stringify(t)}`);
  const c = await client.send(new CancelMessageMoveTaskCommand({ TaskHandle: slow.TaskHandle }));
  check(c.ApproximateNumberOfMessagesMoved >= 1 && c.ApproximateNumberOfMessagesMoved <= 3,
    `cancel answers the moved count: ${JSON.stringify(c)}`);
  t = (await tasks(dlqArn, 1))[0];
  check(['CANCELLING', 'CANCELLED'].includes(t.Status), `after the cancel: ${t.Status}`);
  const stop = Date.now() + 5000;
  while (Date.now() < stop && t.Status !== 'CANCELLED') {
    await sleep(100);
    t = (await tasks(dlqArn, 1))[0];
  }
  check(t.Status === 'CANCELLED', `cancelled: ${JSON.stringify(t)}`);
  const moved = await count(dest);
  await sleep(2500);
  check(await count(dest) === moved && moved === t.ApproximateNumberOfMessagesMoved
    && await count(dlq) === 25 - moved, `nothing moves after the cancel: ${moved} moved`);
  e = await refused(new CancelMessageMoveTaskCommand({ TaskHandle: slow.TaskHandle }));
  check(e && e.name === 'ResourceNotFoundException', `a second cancel: ${JSON.stringify(e)}`);
  const all = await tasks(dlqArn);
  check(all.length === 2 && all[0].Status === 'CANCELLED' && all[1].Status === 'COMPLETED',
    `the list, newest first: ${all.map((x) => x.Status)}`);
}

// A task whose daemon dies (SIGKILL) is taken over by another instance of
// the same Redis once its lease runs out: every letter moves, once.
// TAKEOVER_PID: the daemon of ENDPOINT; TAKEOVER_ENDPOINT: the other one's.
async function takeover() {
  const other = new SQSClient({
    endpoint: process.env.TAKEOVER_ENDPOINT, region: 'us-east-1',
    credentials: { accessKeyId: keyId, secretAccessKey: secret },
  });
  const arnOf = async (QueueUrl) => (await client.send(new GetQueueAttributesCommand({
    QueueUrl, AttributeNames: ['QueueArn'] }))).Attributes.QueueArn;
  const dlq = (await client.send(new CreateQueueCommand({ QueueName: `tdlq-${run}` }))).QueueUrl;
  const dlqArn = await arnOf(dlq);
  const src = (await client.send(new CreateQueueCommand({
    QueueName: `tsrc-${run}`,
    Attributes: { RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlqArn, maxReceiveCount: 1 }) },
  }))).QueueUrl;
  await deadLetters(src, dlq, 12, 'letter');
  await client.send(new StartMessageMoveTaskCommand({ SourceArn: dlqArn, MaxNumberOfMessagesPerSecond: 2 }));
  await sleep(1200);
  process.kill(Number(process.env.TAKEOVER_PID), 'SIGKILL');
  const list = async () => ((await other.send(new ListMessageMoveTasksCommand({ SourceArn: dlqArn })))
    .Results || [])[0];
  let t = await list();
  check(t.Status === 'RUNNING' && t.ApproximateNumberOfMessagesMoved < 12, `before: ${JSON.stringify(t)}`);
  const deadline = Date.now() + 40000;
  while (Date.now() < deadline && t.Status !== 'COMPLETED') {
    await sleep(250);
    t = await list();
  }
  check(t.Status === 'COMPLETED', `taken over and completed: ${JSON.stringify(t)}`);
  const bodies = new Set();
  for (;;) {
    const r = await other.send(new ReceiveMessageCommand({ QueueUrl: src, MaxNumberOfMessages: 10, WaitTimeSeconds: 1 }));
    if (!r.Messages || !r.Messages.length) break;
    for (const m of r.Messages) {
      check(!bodies.has(m.Body), `moved twice: ${m.Body}`);
      bodies.add(m.Body);
    }
  }
  const left = (await other.send(new GetQueueAttributesCommand({
    QueueUrl: dlq, AttributeNames: ['ApproximateNumberOfMessages'] }))).Attributes.ApproximateNumberOfMessages;
  check(bodies.size === 12 && left === '0', `every letter back once: ${bodies.size}, ${left} left`);
}

const cases = { basic, consumer, moves, takeover };
await cases[kase]();
console.log('ok', kase);
