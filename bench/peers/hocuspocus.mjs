// Hocuspocus 4 with its SQLite extension, as its documentation sets it up:
// node hocuspocus.mjs PORT DATABASE_FILE DEBOUNCE_MS
import { Server } from '@hocuspocus/server'
import { SQLite } from '@hocuspocus/extension-sqlite'

const [port, database, debounce] = process.argv.slice(2)
const server = new Server({
  port: Number(port),
  address: '127.0.0.1',
  quiet: true,
  debounce: Number(debounce),
  extensions: [new SQLite({ database })]
})
await server.listen()
