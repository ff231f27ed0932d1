// Drives POST /api/chat with the AI SDK itself: DefaultChatTransport sends, readUIMessageStream
// reads. Prints one JSON line per step for the test to check.
// Usage: node drive.mjs <api url> <token>
import { DefaultChatTransport, readUIMessageStream } from 'ai';

const [url, token] = process.argv.slice(2);
const transport = new DefaultChatTransport({
  api: `${url}/api/chat`,
  headers: { Authorization: `Bearer ${token}` },
});
const chatId = 'sdk-chat';
const question = { id: 'u1', role: 'user', parts: [{ type: 'text', text: 'What can you do?' }] };

async function answerOf(stream) {
  let last;
  for await (const message of readUIMessageStream({
    stream,
    onError: error => console.log(JSON.stringify({ step: 'error', error: String(error) })),
  })) {
    last = message;
  }
  return last;
}

const sent = await transport.sendMessages({
  chatId, messages: [question], trigger: 'submit-message', messageId: 'u1',
  abortSignal: undefined,
});
const first = await answerOf(sent);
console.log(JSON.stringify({ step: 'submit', message: first }));

const again = await transport.sendMessages({
  chatId, messages: [question], trigger: 'regenerate-message', messageId: first.id,
  abortSignal: undefined,
});
const second = await answerOf(again);
console.log(JSON.stringify({ step: 'regenerate', message: second }));

const resumed = await transport.reconnectToStream({ chatId });
console.log(JSON.stringify({ step: 'reconnect', active: resumed !== null }));
