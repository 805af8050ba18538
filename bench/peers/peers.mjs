// `chopin-bench-sockets peers` runs this: the same client workload — the official Yjs client
// code, yjs 13.6 — against chopin and against the Yjs servers people pick instead, one after the
// other on this machine, and prints one table with chopin's ratio to the faster peer.
//
// Servers (each started here, on a free port, with its data in a fresh folder):
//   - y-websocket's reference server (@y/websocket-server), in memory and with LevelDB (y-leveldb);
//   - Hocuspocus 4 with its SQLite extension, at its default debounce (2 s) and at debounce 0.
// Clients: y-websocket's `WebsocketProvider` for chopin and y-websocket-server; Hocuspocus speaks
// its own framing, so its own `HocuspocusProvider` there.
//
// Workloads:
//   - live edits: 1 writer, 10 listeners, 2,000 one-character updates sent back to back; updates
//     per second until every listener's text has them all;
//   - latency: 200 one-character updates at 100 per second; send → every listener applied, p50/p99.
//   - join: a fresh client's connect → synced on a 200,000-character document (warm), median of 5;
//   - memory per idle connection: the server's RSS growth over 1,000 providers on 100 documents;
//   - kept after kill -9: 2,000 updates relayed to a listener, then the server is killed (SIGKILL)
//     and started again on its data; how many of them a fresh client finds.
//
// chopin is started by the Rust side: to kill it, this script prints {"kill":"chopin"} on a line
// of its own and reads chopin's new address from stdin.
//
// Input (JSON, argv[2]): { chopin: { url, cookie, origin, documents: [ids…] }, updates, listeners }.

import { spawn } from 'node:child_process'
import readline from 'node:readline'
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import net from 'node:net'
import os from 'node:os'
import path from 'node:path'
import { fileURLToPath } from 'node:url'
import WebSocket from 'ws'
import * as Y from 'yjs'
import { WebsocketProvider } from 'y-websocket'
import { HocuspocusProvider, HocuspocusProviderWebsocket } from '@hocuspocus/provider'

const here = path.dirname(fileURLToPath(import.meta.url))
const config = JSON.parse(process.argv[2])
const UPDATES = config.updates ?? 2000
const LISTENERS = config.listeners ?? 10
const LATENCY_UPDATES = 200
const TIMEOUT_MS = 120_000

process.setMaxListeners(100)

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

function freePort () {
  return new Promise((resolve, reject) => {
    const server = net.createServer()
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address()
      server.close(() => resolve(port))
    })
    server.on('error', reject)
  })
}

async function waitForPort (port) {
  for (let i = 0; i < 200; i++) {
    const open = await new Promise((resolve) => {
      const socket = net.connect(port, '127.0.0.1', () => { socket.end(); resolve(true) })
      socket.on('error', () => resolve(false))
    })
    if (open) return
    await sleep(50)
  }
  throw new Error(`nothing listened on port ${port}`)
}

/// A WebSocket class that sends chopin's sign-in cookie and Origin with the upgrade.
function socketWith (cookie, origin) {
  return class extends WebSocket {
    constructor (url, protocols) {
      super(url, protocols, { headers: { cookie, origin } })
    }
  }
}

// --- clients ---------------------------------------------------------------------------------

/// A connected, synced client of `server` on document `name`: { doc, text, close }.
async function connect (server, name) {
  const doc = new Y.Doc()
  let close
  const synced = new Promise((resolve) => {
    if (server.kind === 'hocuspocus') {
      const socket = new HocuspocusProviderWebsocket({ url: server.url, WebSocketPolyfill: WebSocket, quiet: true })
      const provider = new HocuspocusProvider({ websocketProvider: socket, name, document: doc, onSynced: () => resolve() })
      provider.attach()
      close = () => { provider.destroy(); socket.destroy() }
    } else {
      const options = { disableBc: true }
      if (server.cookie) options.WebSocketPolyfill = socketWith(server.cookie, server.origin)
      else options.WebSocketPolyfill = WebSocket
      const provider = new WebsocketProvider(server.url, name, doc, options)
      provider.once('sync', () => resolve())
      close = () => provider.destroy()
    }
  })
  await Promise.race([synced, sleep(15_000).then(() => { throw new Error(`${server.label}: no sync within 15 s`) })])
  return { doc, text: doc.getText('source'), close }
}

/// Live edits on document `name`: updates per second to every listener.
async function liveEdits (server, name) {
  const writer = await connect(server, name)
  const listeners = []
  for (let i = 0; i < LISTENERS; i++) listeners.push(await connect(server, name))
  const target = writer.text.length + UPDATES
  const done = listeners.map((l) => new Promise((resolve) => {
    const check = () => { if (l.text.length >= target) { l.text.unobserve(check); resolve(performance.now()) } }
    l.text.observe(check)
  }))
  const started = performance.now()
  for (let i = 0; i < UPDATES; i++) {
    writer.text.insert(writer.text.length, 'x')
  }
  const ends = await Promise.race([Promise.all(done), sleep(TIMEOUT_MS).then(() => { throw new Error(`${server.label}: live edits did not all arrive`) })])
  const took = (Math.max(...ends) - started) / 1000
  for (const c of [writer, ...listeners]) c.close()
  return UPDATES / took
}

/// Latency at 100 updates per second on document `name`: send → the last listener applied, ms.
async function latency (server, name) {
  const writer = await connect(server, name)
  const listeners = []
  for (let i = 0; i < LISTENERS; i++) listeners.push(await connect(server, name))
  const delays = []
  for (let i = 0; i < LATENCY_UPDATES; i++) {
    const target = writer.text.length + 1
    const arrived = listeners.map((l) => new Promise((resolve) => {
      const check = () => { if (l.text.length >= target) { l.text.unobserve(check); resolve(performance.now()) } }
      l.text.observe(check)
    }))
    const sent = performance.now()
    writer.text.insert(writer.text.length, 'y')
    const ends = await Promise.all(arrived)
    delays.push(Math.max(...ends) - sent)
    const next = sent + 10 - performance.now()
    if (next > 0) await sleep(next)
  }
  for (const c of [writer, ...listeners]) c.close()
  delays.sort((a, b) => a - b)
  const at = (q) => delays[Math.min(delays.length - 1, Math.floor(q * delays.length))]
  return { p50: at(0.5), p99: at(0.99) }
}

/// Join on document `name`: a 200,000-character text, then a fresh client's connect → synced, ms
/// (median of 5, after one to warm the server's copy).
async function join (server, name) {
  const writer = await connect(server, name)
  const line = 'a'.repeat(79) + '\n'
  writer.text.insert(0, line.repeat(2500))
  const reader = await connect(server, name)
  const wait = async () => { while (reader.text.length < 200_000) await sleep(5) }
  await Promise.race([wait(), sleep(TIMEOUT_MS).then(() => { throw new Error(`${server.label}: the text did not arrive`) })])
  const times = []
  for (let i = 0; i < 6; i++) {
    const started = performance.now()
    const fresh = await connect(server, name)
    if (fresh.text.length < 200_000) throw new Error(`${server.label}: a synced joiner holds ${fresh.text.length} characters`)
    if (i > 0) times.push(performance.now() - started)
    fresh.close()
  }
  writer.close()
  reader.close()
  times.sort((a, b) => a - b)
  return times[Math.floor(times.length / 2)]
}

/// The resident memory of process `pid`, KiB.
function rssKib (pid) {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8')
  return Number(/VmRSS:\s+(\d+)/.exec(status)[1])
}

/// Memory per idle connection: the server's RSS growth, KiB, over 1,000 synced providers spread
/// over `names` (each document opened once first, so its copy is not counted per connection).
async function memoryPerConnection (server, names) {
  const warm = []
  for (const name of names) warm.push(await connect(server, name))
  await sleep(2000)
  const before = rssKib(server.pid)
  const idle = []
  for (let i = 0; i < 1000; i++) idle.push(await connect(server, names[i % names.length]))
  await sleep(2000)
  const after = rssKib(server.pid)
  for (const c of [...idle, ...warm]) c.close()
  return (after - before) / 1000
}

/// Kept after kill -9 on document `name`: of `UPDATES` relayed updates, how many a fresh client
/// finds once the server was killed and started again.
async function keptAfterKill (server, name) {
  const writer = await connect(server, name)
  const listener = await connect(server, name)
  const base = writer.text.length
  const target = base + UPDATES
  const relayed = new Promise((resolve) => {
    const check = () => { if (listener.text.length >= target) { listener.text.unobserve(check); resolve() } }
    listener.text.observe(check)
  })
  for (let i = 0; i < UPDATES; i++) writer.text.insert(writer.text.length, 'k')
  await Promise.race([relayed, sleep(TIMEOUT_MS).then(() => { throw new Error(`${server.label}: the updates were not relayed`) })])
  // Every update reached a listener: the server is killed before the clients could send them
  // again from their own copies (they are closed at once, never to reconnect).
  const again = await server.crash()
  writer.close()
  listener.close()
  const fresh = await connect(again, name)
  const found = fresh.text.toString().split('').filter((c) => c === 'k').length
  fresh.close()
  return { kept: found, server: again }
}

// --- servers ---------------------------------------------------------------------------------

async function ywebsocketServer (label, persistence, data = mkdtempSync(path.join(os.tmpdir(), 'peer-yws-'))) {
  const port = await freePort()
  const env = { ...process.env, HOST: '127.0.0.1', PORT: String(port) }
  if (persistence) env.YPERSISTENCE = data
  const child = spawn(process.execPath, [path.join(here, 'node_modules/@y/websocket-server/src/server.js')], { env, stdio: 'ignore' })
  await waitForPort(port)
  return {
    label,
    kind: 'y-websocket',
    url: `ws://127.0.0.1:${port}`,
    pid: child.pid,
    crash: async () => { await killed(child); return ywebsocketServer(label, persistence, data) },
    stop: async () => { await killed(child); rmSync(data, { recursive: true, force: true }) }
  }
}

function killed (child) {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve()
    child.once('exit', () => resolve())
    child.kill('SIGKILL')
  })
}

async function hocuspocusServer (label, debounce, data = mkdtempSync(path.join(os.tmpdir(), 'peer-hp-'))) {
  const port = await freePort()
  const child = spawn(process.execPath, [path.join(here, 'hocuspocus.mjs'), String(port), path.join(data, 'db.sqlite'), String(debounce)], { stdio: 'ignore' })
  await waitForPort(port)
  return {
    label,
    kind: 'hocuspocus',
    url: `ws://127.0.0.1:${port}`,
    pid: child.pid,
    crash: async () => { await killed(child); return hocuspocusServer(label, debounce, data) },
    stop: async () => { await killed(child); rmSync(data, { recursive: true, force: true }) }
  }
}

// --- the run ---------------------------------------------------------------------------------

const chopinDocuments = [...config.chopin.documents]
const answers = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]()
const chopin = {
  label: 'chopin (SQLite, every update durable before relay)',
  kind: 'y-websocket',
  url: config.chopin.url,
  cookie: config.chopin.cookie,
  origin: config.chopin.origin,
  pid: config.chopin.pid,
  durable: true,
  crash: async () => {
    console.log(JSON.stringify({ kill: 'chopin' }))
    const { value } = await answers.next()
    const { url, origin } = JSON.parse(value)
    return { ...chopin, url, origin }
  },
  stop: async () => {}
}
const peers = [
  () => hocuspocusServer('Hocuspocus 4.7 + SQLite, default debounce', 2000),
  () => hocuspocusServer('Hocuspocus 4.7 + SQLite, debounce 0', 0),
  () => ywebsocketServer('y-websocket-server 0.1.1', false),
  () => ywebsocketServer('y-websocket-server 0.1.1 + LevelDB', true)
]

const rows = []
/// Measures `server` on documents `names`; the server it ends with (started again after its kill).
async function measure (server, names, idle) {
  const edits = await liveEdits(server, names[0])
  const lat = await latency(server, names[1])
  const joined = await join(server, names[3])
  const memory = await memoryPerConnection(server, idle)
  const { kept, server: after } = await keptAfterKill(server, names[2])
  rows.push({ label: server.label, edits, p50: lat.p50, p99: lat.p99, join: joined, memory, kept, chopin: server === chopin })
  return after
}

const IDLE = config.idleDocuments ?? 100
await measure(chopin, chopinDocuments.splice(0, 4), chopinDocuments.splice(0, IDLE))
for (const start of peers) {
  let server = await start()
  try {
    const n = rows.length
    const idle = Array.from({ length: IDLE }, (_, i) => `idle-${n}-${i}`)
    server = await measure(server, [`edits-${n}`, `latency-${n}`, `kill-${n}`, `join-${n}`], idle)
  } finally {
    await server.stop()
  }
}

const mine = rows.find((r) => r.chopin)
const others = rows.filter((r) => !r.chopin)
const fastest = others.reduce((a, b) => (b.edits > a.edits ? b : a))
const quickest = others.reduce((a, b) => (b.p50 < a.p50 ? b : a))
console.log(`chopin-bench-sockets peers: 1 writer, ${LISTENERS} listeners; ${UPDATES} one-character updates back to back, then ${LATENCY_UPDATES} at 100/s; ${os.cpus().length} cores`)
console.log()
console.log(`| server | live edits, updates/s to all listeners | latency p50 ms | latency p99 ms | join 200,000 characters, ms | KiB per idle connection | of ${UPDATES} relayed updates, kept after kill -9 |`)
console.log('|---|---|---|---|---|---|---|')
for (const r of rows) console.log(`| ${r.label} | ${r.edits.toFixed(0)} | ${r.p50.toFixed(2)} | ${r.p99.toFixed(2)} | ${r.join.toFixed(1)} | ${r.memory.toFixed(1)} | ${r.kept} |`)
console.log()
const line = (what, ratio, goal) => console.log(`| ${what} | ${ratio.toFixed(2)} | ${goal} | ${ratio >= 1 ? 'met' : 'NOT met'} |`)
console.log('| chopin against the best peer | ratio | goal | |')
console.log('|---|---|---|---|')
line(`live edits against ${fastest.label}`, mine.edits / fastest.edits, '≥ 1.0')
line(`latency p50 against ${quickest.label} (theirs / ours)`, quickest.p50 / mine.p50, '≥ 1.0')
line(`latency p99 against ${quickest.label} (theirs / ours)`, quickest.p99 / mine.p99, '≥ 1.0')
const joiner = others.reduce((a, b) => (b.join < a.join ? b : a))
const smallest = others.reduce((a, b) => (b.memory < a.memory ? b : a))
line(`join against ${joiner.label} (theirs / ours)`, joiner.join / mine.join, '≥ 1.0')
line(`memory per idle connection against ${smallest.label} (theirs / ours)`, smallest.memory / mine.memory, '≥ 1.0')
line('relayed updates kept after kill -9 (share)', mine.kept / UPDATES, '1.00')
process.exit(0)
