// A coding agent through the official MCP TypeScript SDK, written from docs/mcp.md alone: it
// reads an approved implementation graph, claims it, carries every task through start, pull
// request and completion in dependency order (taking the tasks the answers mark ready), sends
// one report twice under its key, verifies the whole graph and reports what it saw.
//
// Usage: node implementation.mjs '<json>' where json is
//   { "url": "http://127.0.0.1:PORT/mcp", "token": "<GitHub token>", "document": "<URL or id>",
//     "timeoutMs": 20000 }
// Prints one JSON line with what it saw; exits non-zero on failure.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const config = JSON.parse(process.argv[2]);
const seen = { reports: 0 };
function fail(why) {
  console.log(JSON.stringify({ ok: false, error: String(why), seen }));
  process.exit(1);
}
setTimeout(() => fail(`timed out after ${config.timeoutMs ?? 20000} ms`), config.timeoutMs ?? 20000).unref();

async function call(client, name, args) {
  const result = await client.callTool({ name, arguments: args });
  if (result.isError) throw new Error(`${name} refused: ${JSON.stringify(result.structuredContent)}`);
  return result.structuredContent;
}

try {
  const transport = new StreamableHTTPClientTransport(new URL(config.url), {
    requestInit: { headers: { Authorization: `Bearer ${config.token}` } },
  });
  const client = new Client({ name: 'chopin-e2e-coding-agent', version: '1.0.0' });
  await client.connect(transport);

  const read = await call(client, 'read_implementation', { document: config.document });
  seen.read = { documentId: read.document.id, provenance: read.provenance, claimable: read.graph.claimable };
  const documentId = read.document.id;
  const { planRevision, graphVersion, graphRevision } = read.graph;
  const started = await call(client, 'start_implementation', {
    documentId, planRevision, graphVersion, graphRevision,
    repository: read.repository,
    branch: read.provenance?.baseBranch ?? 'main',
    commit: read.provenance?.baseCommit ?? '0'.repeat(40),
  });
  const runId = started.run.runId;
  seen.runId = runId;
  let run = started.run;
  let key = 0;
  const report = async (tool, fields) => {
    key += 1;
    seen.reports += 1;
    const answer = await call(client, tool, { documentId, runId, idempotencyKey: `k-${key}`, ...fields });
    run = answer.run;
    return answer;
  };
  seen.order = [];
  for (let round = 0; round < 100; round += 1) {
    const ready = run.tasks.find((t) => t.ready);
    if (!ready) break;
    seen.order.push(ready.id);
    await report('start_task', { taskId: ready.id });
    const url = `https://github.com/${read.repository}/pull/${seen.order.length}`;
    await report('report_pr', { taskId: ready.id, url, state: 'open' });
    if (seen.order.length === 1) {
      // The same report again under its key (a retry after a lost answer): the first answer.
      const first = JSON.stringify(run);
      const again = await client.callTool({
        name: 'report_pr',
        arguments: { documentId, runId, idempotencyKey: `k-${key}`, taskId: ready.id, url, state: 'open' },
      });
      seen.retrySame = JSON.stringify(again.structuredContent.run) === first;
    }
    await report('report_pr', { taskId: ready.id, url, state: 'merged' });
    await report('complete_task', { taskId: ready.id, summary: `Did ${ready.id}.` });
  }
  const verified = await report('report_verification', {
    tasks: run.tasks.map((t) => ({ taskId: t.id, passed: true, evidence: `Reviewed ${t.id}.` })),
  });
  seen.final = { state: verified.run.state, tasks: verified.run.tasks.map((t) => t.state) };
  const after = await call(client, 'read_implementation', { document: documentId });
  seen.after = { state: after.graph.state, verified: after.graph.verified, claimable: after.graph.claimable };
  await client.close();
  console.log(JSON.stringify({ ok: true, seen }));
  process.exit(0);
} catch (e) {
  fail(e?.stack ?? e);
}
