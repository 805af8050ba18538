// Decision blocks read out of a document's source (docs/documents.md, "Decisions in the source"):
// a fenced code block whose info string is exactly `decision`, one `key: value` per line.
// Only what the cards need is read; a block that does not read is skipped (the server decides
// what is valid, and refuses an answer to anything else).

const FENCE = /^(`{3,}|~{3,})\s*decision\s*$/;

function value(text) {
  const v = text.trim();
  if (v.startsWith('"')) {
    try {
      const parsed = JSON.parse(v);
      if (typeof parsed === 'string') return parsed;
    } catch {
      // read as written
    }
  }
  return v;
}

export function decisions(source) {
  const lines = source.split('\n');
  const found = [];
  for (let i = 0; i < lines.length; i++) {
    const open = lines[i].match(FENCE);
    if (!open) continue;
    const fence = open[1];
    const body = [];
    let j = i + 1;
    while (j < lines.length && !(lines[j].trim().startsWith(fence[0].repeat(fence.length)) && lines[j].trim().replace(/[`~]/g, '') === '')) {
      body.push(lines[j]);
      j++;
    }
    i = j;
    const d = { id: '', state: '', question: '', header: '', hint: '', multi: false, options: [], answers: [] };
    for (const line of body) {
      const at = line.indexOf(':');
      if (at < 0) continue;
      const key = line.slice(0, at).trim();
      const v = value(line.slice(at + 1));
      if (key === 'id') d.id = v;
      else if (key === 'state') d.state = v;
      else if (key === 'question') d.question = v;
      else if (key === 'header') d.header = v;
      else if (key === 'hint') d.hint = v;
      else if (key === 'multi') d.multi = v === 'yes';
      else if (key === 'option') d.options.push({ label: v, detail: '' });
      else if (key === 'detail' && d.options.length) d.options[d.options.length - 1].detail = v;
      else if (key === 'answer' || key === 'chose') d.answers.push(v);
    }
    if (d.id && d.question) found.push(d);
  }
  return found;
}
