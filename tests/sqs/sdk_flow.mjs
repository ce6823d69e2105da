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
  ListQueuesCommand, QueueDoesNotExist,
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

const cases = { basic, consumer };
await cases[kase]();
console.log('ok', kase);
