// Small helpers for building the page. Text goes in as text nodes only.

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === false || value === undefined || value === null) continue;
    if (name.startsWith('on')) throw new Error('no inline handlers');
    node.setAttribute(name, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function clear(node) {
  while (node.firstChild) node.firstChild.remove();
}

export function meta(name) {
  return document.querySelector(`meta[name="${name}"]`)?.getAttribute('content') ?? '';
}

/// fetch on this origin, JSON in and out: `{status, body}` where body is the parsed JSON or null.
export async function api(path, { method = 'GET', body } = {}) {
  const init = { method, credentials: 'same-origin', headers: {} };
  if (body !== undefined) {
    init.headers['content-type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (e) {
    return { status: 0, body: { error: 'unreachable', message: 'The server could not be reached.' } };
  }
  let parsed = null;
  try {
    parsed = await response.json();
  } catch {
    parsed = null;
  }
  return { status: response.status, body: parsed };
}

/// The words of a refusal: the server's message, else its code, else the status.
export function words(answer) {
  return answer.body?.message ?? answer.body?.error ?? `The server answered ${answer.status}.`;
}

/// A link (href) only for paths on this server: anything else (javascript:, other hosts) is text.
export function safePath(path) {
  return typeof path === 'string' && path.startsWith('/') && !path.startsWith('//') ? path : null;
}
