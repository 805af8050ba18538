// Builds the pages' script and style into ../server/web-dist, which the server embeds.
// Output names carry a content hash; manifest.json tells the server which files to link.
// Deterministic: the same sources and lockfile give the same bytes (a test rebuilds and compares).
import { build } from 'esbuild';
import { mkdirSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import { basename, dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const out = process.argv[2] ?? join(here, '..', 'server', 'web-dist');

rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const result = await build({
  entryPoints: { app: join(here, 'src', 'app.js') },
  bundle: true,
  minify: true,
  format: 'esm',
  target: ['chrome110', 'firefox110', 'safari16'],
  outdir: out,
  entryNames: '[name]-[hash]',
  metafile: true,
  legalComments: 'none',
  sourcemap: false,
  logLevel: 'warning',
  absWorkingDir: here,
});
const files = Object.keys(result.metafile.outputs).map((f) => basename(f));
const manifest = {
  script: files.find((f) => f.endsWith('.js')),
  style: files.find((f) => f.endsWith('.css')),
};
writeFileSync(join(out, 'manifest.json'), JSON.stringify(manifest, null, 2) + '\n');
// Each asset also gzipped, served to browsers that accept it (node's gzip writes no time or
// name into the header, so the bytes are the same on every build).
for (const name of files) {
  writeFileSync(join(out, `${name}.gz`), gzipSync(readFileSync(join(out, name)), { level: 9 }));
}
console.log(readdirSync(out).sort().join('\n'));
