// An MCP client nobody on the team wrote: the official TypeScript SDK's Streamable HTTP client,
// configured only as docs/mcp.md says (the URL and an Authorization header). It lists the
// tools, creates a document, reads it, updates it from the revision it read, and reads again.
//
// Usage: node mcp.mjs '<json>' where json is
//   { "url": "http://127.0.0.1:PORT/mcp", "token": "<GitHub token>", "repository": "owner/repo",
//     "timeoutMs": 10000 }
// Prints one JSON line with what it saw; exits non-zero on failure.

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const config = JSON.parse(process.argv[2]);
const seen = {};
function fail(why) {
  console.log(JSON.stringify({ ok: false, error: String(why), seen }));
  process.exit(1);
}
setTimeout(() => fail(`timed out after ${config.timeoutMs ?? 10000} ms`), config.timeoutMs ?? 10000).unref();

async function call(client, name, args) {
  const result = await client.callTool({ name, arguments: args });
  if (result.isError) throw new Error(`${name} refused: ${JSON.stringify(result.structuredContent)}`);
  return result;
}

try {
  const transport = new StreamableHTTPClientTransport(new URL(config.url), {
    requestInit: { headers: { Authorization: `Bearer ${config.token}` } },
  });
  const client = new Client({ name: 'chopin-e2e-outside-client', version: '1.0.0' });
  await client.connect(transport);
  seen.tools = (await client.listTools()).tools.map((t) => t.name);

  const created = await call(client, 'create_document', {
    repository: config.repository,
    title: 'From outside',
    source: '# From outside\n\nFirst words.\n',
  });
  seen.created = created.structuredContent;

  const read = await call(client, 'read_document', { document: created.structuredContent.id });
  seen.readText = read.content[0].text;
  const revision = read.structuredContent.revision;

  const updated = await call(client, 'update_document', {
    document: created.structuredContent.url,
    planRevision: revision,
    source: '# From outside\n\nSecond words.\n',
    idempotencyKey: 'outside-1',
  });
  seen.updated = updated.structuredContent;

  const again = await call(client, 'read_document', { document: created.structuredContent.id });
  seen.source = again.structuredContent.source;
  await client.close();
  console.log(JSON.stringify({ ok: true, ...seen }));
  process.exit(0);
} catch (error) {
  fail(error?.stack ?? error);
}
