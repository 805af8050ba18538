// Whether chopin joins the document's conversation without being named: the server keeps the
// pause for everyone in the document; a writer turns it on or off here, and everybody's page
// reads it again when Chat says it changed.
import { el, api, words } from './dom.js';

/// The control. `say(words)` shows a refusal.
export function participationControl(id, say) {
  const box = el('input', { type: 'checkbox', id: 'participation', disabled: true });
  const label = el('label', { class: 'participation', for: 'participation' }, box, ' chopin joins in without @chopin');
  const path = `/api/channels/${encodeURIComponent(id)}/participation`;
  let writable = false;

  function show(state) {
    box.checked = !state.paused;
    label.title = state.paused && state.pausedBy ? `Paused by @${state.pausedBy}` : '';
    label.dataset.paused = state.paused ? 'yes' : 'no';
  }
  async function read() {
    const answer = await api(path);
    if (answer.status === 200) show(answer.body);
  }
  box.addEventListener('change', async () => {
    box.disabled = true;
    const answer = await api(path, { method: 'PUT', body: { paused: !box.checked } });
    box.disabled = !writable;
    if (answer.status === 200) show(answer.body);
    else {
      say(words(answer));
      read();
    }
  });
  return {
    label,
    read,
    enable(yes) {
      writable = yes;
      box.disabled = !yes;
    },
  };
}
