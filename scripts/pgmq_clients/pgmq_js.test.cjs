// pgmq-js 1.3.1 (npm) against django_pgqueue's SQL API in schema "pgmq".
// The package ships no tests (only dist/), so this drives every method it exposes.
// Run by scripts/pgmq_client_suite.sh from a directory where the client is installed:
//   PG_DATABASE=<db> node --test pgmq_js.test.cjs
"use strict";
const test = require("node:test");
const assert = require("node:assert/strict");
const crypto = require("node:crypto");
const { Pgmq } = require("pgmq-js");

const config = {
  host: process.env.PG_HOST || "127.0.0.1",
  port: Number(process.env.PG_PORT || 5432),
  database: process.env.PG_DATABASE,
  user: process.env.PG_USERNAME || "postgres",
  password: process.env.PG_PASSWORD || "postgres",
  ssl: false, // the client's default is true
};
const fresh = () => "t_" + crypto.randomBytes(6).toString("hex");

test("construction creates the extension unless skipExtensionCreation", async () => {
  // The SQL API is plain functions, not the pgmq extension: CREATE EXTENSION fails.
  await assert.rejects(Pgmq.new({ ...config }), /extension "pgmq"/);
  const pgmq = await Pgmq.new({ ...config }, { skipExtensionCreation: true });
  await pgmq.close();
});

test("every method of the client", async (t) => {
  const pgmq = await Pgmq.new({ ...config }, { skipExtensionCreation: true });
  const name = fresh();
  t.after(() => pgmq.close());

  await t.test("queues", async () => {
    await pgmq.queue.create(name);
    await pgmq.queue.createUnlogged(name + "_u");
    const listed = Object.fromEntries((await pgmq.queue.list()).map((q) => [q.name, q]));
    assert.equal(listed[name].isUnlogged, false);
    assert.equal(listed[name + "_u"].isUnlogged, true);
    assert.equal(listed[name].isPartitioned, false);
    await pgmq.queue.detachArchive(name);
    await pgmq.queue.drop(name + "_u");
    assert.equal((await pgmq.queue.list()).some((q) => q.name === name + "_u"), false);
  });

  await t.test("send, read, pop", async () => {
    const id = await pgmq.msg.send(name, { n: 1 });
    const ids = await pgmq.msg.sendBatch(name, [{ n: 2 }, { n: 3 }, { n: 4 }]);
    assert.deepEqual(ids, [id + 1, id + 2, id + 3]);
    const delayed = await pgmq.msg.send(name, { n: 5 }, 3600);
    const first = await pgmq.msg.read(name, 30);
    assert.deepEqual([first.msgId, first.readCount, first.message], [id, 1, { n: 1 }]);
    assert.ok(first.vt > first.enqueuedAt);
    const batch = await pgmq.msg.readBatch(name, 30, 2);
    assert.deepEqual(batch.map((m) => m.message.n), [2, 3]);
    const popped = await pgmq.msg.pop(name);
    assert.deepEqual([popped.msgId, popped.message], [id + 3, { n: 4 }]);
    assert.equal(await pgmq.msg.pop(name), undefined);
    assert.equal(await pgmq.msg.read(name, 30), undefined);
    // Untyped parameters: set_vt resolves to one function.
    const back = await pgmq.msg.setVt(name, delayed, 0);
    assert.equal(back.msgId, delayed);
    assert.equal((await pgmq.msg.read(name, 30)).msgId, delayed);
  });

  await t.test("archive, delete, purge, metrics", async () => {
    const ids = await pgmq.msg.sendBatch(name, [{}, {}, {}, {}, {}]);
    assert.equal(await pgmq.msg.archive(name, ids[0]), true);
    assert.equal(await pgmq.msg.archive(name, ids[0]), false);
    assert.deepEqual((await pgmq.msg.archiveBatch(name, [ids[1]])), [ids[1]]);
    assert.equal(await pgmq.msg.delete(name, ids[2]), true);
    assert.deepEqual((await pgmq.msg.deleteBatch(name, [ids[3]])), [ids[3]]);
    const metrics = await pgmq.queue.getMetrics(name);
    assert.equal(metrics.queueName, name);
    assert.equal(metrics.queueLength, 5); // 4 read earlier and still hidden, and ids[4]
    assert.ok(metrics.totalMessages >= 10);
    assert.ok((await pgmq.queue.getAllMetrics()).some((m) => m.queueName === name));
    await pgmq.queue.purge(name);
    assert.equal((await pgmq.queue.getMetrics(name)).queueLength, 0);
    await pgmq.queue.drop(name);
  });
});
