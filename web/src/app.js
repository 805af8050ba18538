// The pages of a Chopin server. The server decides which page a URL is (a <meta name="chopin-page">)
// and what it already knows (the document's id, the repository, who is signed in); this script
// draws it. Every text from a document, Chat or the server is put in the page as text
// (textContent), never as HTML.
import './style.css';
import { el, meta, api, clear, words } from './dom.js';
import { homePage } from './home.js';
import { repositoryPage } from './repository.js';
import { documentPage } from './document.js';

function header(main) {
  const login = meta('chopin-login');
  const bar = el('header', { class: 'bar' },
    el('a', { href: '/', class: 'brand' }, 'Chopin'),
    el('span', { class: 'server', id: 'server-state' },
      `${meta('chopin-version')} · ${meta('chopin-database')} · Planner: ${meta('chopin-harness')}`),
  );
  if (login) {
    const out = el('button', { type: 'button', id: 'sign-out' }, 'Sign out');
    out.addEventListener('click', async () => {
      await api('/auth/logout', { method: 'POST' });
      location.assign('/');
    });
    bar.append(el('span', { class: 'who', id: 'who' }, `Signed in as ${login}`), out);
  }
  main.before(bar);
}

function signIn(main, why) {
  clear(main);
  // Come back here once GitHub has signed you in (the sign-in lands on /).
  sessionStorage.setItem('chopin-after-sign-in', location.pathname);
  main.append(el('h1', {}, 'Sign in'), el('p', {}, why));
  if (meta('chopin-auth') === 'local') {
    main.append(deviceSignIn());
    return;
  }
  main.append(el('p', {}, el('a', { href: '/auth/github', class: 'button', id: 'sign-in' }, 'Sign in with GitHub')));
}

/// The device flow (a local server has no web sign-in): GitHub shows a page where you type a
/// code; this page asks the server until GitHub says yes, then signs the browser in.
function deviceSignIn() {
  const box = el('div', { id: 'device' });
  const start = el('button', { type: 'button', id: 'sign-in', class: 'button' }, 'Sign in with GitHub');
  const said = el('p', { class: 'status', id: 'device-status', role: 'status' });
  box.append(start, said);
  start.addEventListener('click', async () => {
    start.disabled = true;
    const begun = await api('/auth/device', { method: 'POST' });
    if (begun.status !== 200) {
      said.textContent = words(begun);
      start.disabled = false;
      return;
    }
    const { userCode, verificationUri, interval } = begun.body;
    const link = /^https?:\/\//.test(verificationUri ?? '') ? el('a', { href: verificationUri, target: '_blank', rel: 'noopener noreferrer' }, verificationUri) : verificationUri;
    clear(said);
    said.append('Open ', link, ' and enter the code ', el('strong', { id: 'user-code' }, userCode), '. This page goes on once GitHub has your answer.');
    const poll = async () => {
      const now = await api('/auth/device');
      const status = now.body?.status;
      if (status === 'approved') {
        const done = await api('/auth/device/complete', { method: 'POST' });
        if (done.status === 200) location.reload();
        else said.textContent = words(done);
      } else if (status === 'pending') {
        setTimeout(poll, Math.max(1, interval ?? 5) * 1000);
      } else {
        said.textContent = now.body?.message ?? `Sign-in ${status ?? 'failed'}: start again.`;
        start.disabled = false;
      }
    };
    setTimeout(poll, Math.max(1, interval ?? 5) * 1000);
  });
  return box;
}

function notFound(main, heading = 'Not found') {
  clear(main);
  main.append(
    el('h1', { id: 'not-found' }, heading),
    el('p', {}, meta('chopin-missing') || 'Nothing is here.'),
    el('p', {}, el('a', { href: '/' }, 'Go to the start page')),
  );
}

function start() {
  const main = document.getElementById('main');
  header(main);
  const page = meta('chopin-page');
  const signedIn = Boolean(meta('chopin-login'));
  if (page === 'not-found') return notFound(main);
  if (page === 'error') return notFound(main, 'This page could not be shown');
  if (page === 'home') {
    const after = sessionStorage.getItem('chopin-after-sign-in');
    if (signedIn && after && after !== '/') {
      sessionStorage.removeItem('chopin-after-sign-in');
      location.replace(after);
      return;
    }
    return homePage(main, signedIn, signIn);
  }
  if (!signedIn) return signIn(main, 'Sign in with GitHub to open this page.');
  if (page === 'repository') return repositoryPage(main, meta('chopin-repository'));
  if (page === 'document') return documentPage(main, meta('chopin-document'));
  return notFound(main);
}

start();
