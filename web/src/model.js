// The composer's model and command controls: what the server's `chat:model` offers, for
// writers only (the server sends it to nobody else). The server decides what can be chosen;
// this only shows it and sends the choice back.
import { el, clear } from './dom.js';

const DEFAULT = '';
const UNREADABLE = "This document's model choice couldn't be read: the default model runs until it can be.";

/// Words above the composer for a choice that is not what runs (empty when nothing to say).
function notice(frame) {
  const chosen = frame.choice?.model ?? '';
  if (frame.state === 'unknown') return `What chopin offers is not known yet; the choice of ${chosen} is kept.`;
  if (frame.state !== 'unavailable') return '';
  if (frame.reason === 'level-gone') return `${chosen} does not offer the reasoning level ${frame.choice?.thinkingLevel ?? ''} now: it runs at its own level.`;
  if (frame.reason === 'no-catalog') return `No model can be chosen now: the default model runs instead of ${chosen}.`;
  return `${chosen} is not available now: the default model runs until it is.`;
}

/// The controls, and the handlers the room's frames go to. `send(frame)` sends on the room.
export function modelControls(send) {
  const model = el('select', { id: 'model-choice', 'aria-label': 'Model' });
  const level = el('select', { id: 'level-choice', 'aria-label': 'Reasoning level' });
  const command = el('select', { id: 'command-choice', 'aria-label': 'Run a command' });
  const words = el('p', { class: 'model-notice', id: 'model-notice', role: 'status' });
  const box = el('div', { class: 'model', id: 'model', hidden: true }, model, level, command, words);
  let last = null;
  let unreadable = false;
  let chosenCommand = null;

  function choose() {
    const id = model.value === DEFAULT ? null : model.value;
    const thinkingLevel = id && level.value !== DEFAULT ? level.value : null;
    send({ type: 'chat:model', model: id, thinkingLevel });
  }
  model.addEventListener('change', () => {
    level.value = DEFAULT;
    choose();
  });
  level.addEventListener('change', choose);

  function draw(frame) {
    last = frame;
    const models = frame.models ?? [];
    const commands = frame.commands ?? [];
    box.hidden = !models.length && !commands.length && !frame.choice;
    clear(model);
    model.hidden = !models.length;
    model.append(el('option', { value: DEFAULT }, 'Default model'));
    const listed = new Set();
    for (const m of models) {
      // A model listed twice is shown twice; a choice of its id is the first entry's.
      const option = el('option', { value: m.id }, m.name ?? m.id, m.description ? ` — ${m.description}` : '');
      if (listed.has(m.id)) option.disabled = true;
      listed.add(m.id);
      model.append(option);
    }
    model.value = frame.choice && listed.has(frame.choice.model) ? frame.choice.model : DEFAULT;
    const entry = models.find((m) => m.id === model.value);
    clear(level);
    level.append(el('option', { value: DEFAULT }, "The model's own level"));
    for (const l of entry?.thinkingLevels ?? []) level.append(el('option', { value: l }, l));
    level.hidden = !(entry?.thinkingLevels ?? []).length;
    level.value = frame.choice?.thinkingLevel && (entry?.thinkingLevels ?? []).includes(frame.choice.thinkingLevel) ? frame.choice.thinkingLevel : DEFAULT;
    clear(command);
    command.hidden = !commands.length;
    command.append(el('option', { value: '' }, 'Run a command…'));
    commands.forEach((c, i) => command.append(el('option', { value: String(i) }, `/${c.name}`, c.description ? ` — ${c.description}` : '')));
    command.value = '';
    say();
  }

  /// The line under the lists: an unreadable choice first, else what the last state says.
  function say() {
    words.textContent = unreadable ? UNREADABLE : last ? notice(last) : '';
  }

  return {
    box,
    command,
    /// `chat:model`, `chat:model-refused`, `chat:model-unreadable`: true if it was one.
    frame(frame) {
      if (frame.type === 'chat:model') draw(frame);
      else if (frame.type === 'chat:model-refused') words.textContent = frame.message ?? frame.code;
      else if (frame.type === 'chat:model-unreadable') {
        unreadable = Boolean(frame.unreadable);
        say();
      } else return false;
      return true;
    },
    /// The command chosen from the list, put at the start of `text` (a textarea) as `/name `.
    pick(text) {
      const c = (last?.commands ?? [])[Number(command.value)];
      command.value = '';
      if (!c) return;
      chosenCommand = c;
      const rest = text.value.replace(/^\/\S*\s*/, '');
      text.value = `/${c.name} ${rest}`;
      text.focus();
    },
    /// The references a send of `body` carries: the chosen command while its `/name` still
    /// opens the text (offsets in UTF-16 code units, as JavaScript counts).
    references(body) {
      if (!chosenCommand) return undefined;
      const token = `/${chosenCommand.name}`;
      if (!body.startsWith(token) || (body.length > token.length && !/\s/.test(body[token.length]))) return undefined;
      return [{ type: 'command', name: chosenCommand.name, commandKind: chosenCommand.kind, start: 0, end: token.length }];
    },
    /// The send went: the chip goes with it.
    sent() {
      chosenCommand = null;
    },
  };
}
