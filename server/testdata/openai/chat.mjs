// Drives switchyard's OpenAI-compatible API with the official openai
// package, as an application would: node chat.mjs BASEURL KEY, where
// BASEURL ends in /v1. TestOpenAIClientLibrary (server/openai_test.go) runs
// it against a real instance whose node serves:
//
//   echo: answers the content it received, streamed in pieces when asked,
//         with usage {prompt_tokens: number of messages in params,
//         completion_tokens: characters of the answer};
//   fail: reports a failure whose message contains "deliberate failure";
//   embed: answers, for each of params.input, the vector [its length, 0.5],
//          with usage {prompt_tokens: the inputs' characters};
//   params: answers the params it received, as JSON.
//
// and the instance has the model alias house-model = nowhere (no node), then
// echo.
//
// Exits 0 when every check passes; otherwise prints what failed and exits 1.
import OpenAI from 'openai';

const [baseURL, apiKey] = process.argv.slice(2);
if (!baseURL || !apiKey) {
  console.error('usage: node chat.mjs BASEURL KEY');
  process.exit(2);
}

const client = new OpenAI({ baseURL, apiKey, timeout: 20_000 });

const messages = [
  { role: 'system', content: 'You are terse.' },
  { role: 'user', content: 'first question' },
  { role: 'assistant', content: 'first answer' },
  // A list of parts, as vision-capable clients send it.
  { role: 'user', content: [{ type: 'text', text: 'second ' }, { type: 'text', text: 'question' }] },
];
// What the node must see as content: the last system and user messages.
const flattened = 'System: You are terse.\n\nUser: second question';

let failures = 0;
async function check(name, fn) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failures++;
    console.log(`FAIL ${name}: ${e?.stack ?? e}`);
  }
}

function expect(cond, what) {
  if (!cond) throw new Error(what);
}

function expectEqual(got, want, what) {
  if (JSON.stringify(got) !== JSON.stringify(want)) {
    throw new Error(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
  }
}

await check('plain completion', async () => {
  const r = await client.chat.completions.create({ model: 'gemmanet/echo', messages });
  expectEqual(r.object, 'chat.completion', 'object');
  expectEqual(r.model, 'gemmanet/echo', 'model');
  expect(r.id.startsWith('chatcmpl-'), `id ${r.id} does not start with chatcmpl-`);
  expectEqual(r.choices.length, 1, 'number of choices');
  expectEqual(r.choices[0].message.role, 'assistant', 'role');
  expectEqual(r.choices[0].message.content, flattened, 'content (the node echoes the flattened conversation)');
  expectEqual(r.choices[0].finish_reason, 'stop', 'finish_reason');
  expectEqual(r.usage.prompt_tokens, messages.length, 'usage.prompt_tokens (the node counts params.messages)');
  expectEqual(r.usage.completion_tokens, [...flattened].length, 'usage.completion_tokens');
  expectEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens, 'usage.total_tokens');
});

await check('streaming completion', async () => {
  const stream = await client.chat.completions.create({ model: 'gemmanet/echo', messages, stream: true });
  const deltas = [];
  let role = null;
  let finish = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    expectEqual(chunk.object, 'chat.completion.chunk', 'chunk object');
    expectEqual(chunk.model, 'gemmanet/echo', 'chunk model');
    const choice = chunk.choices[0];
    if (choice.delta.role) role = choice.delta.role;
    if (choice.delta.content) deltas.push(choice.delta.content);
    if (choice.finish_reason) finish = choice.finish_reason;
  }
  expectEqual(role, 'assistant', 'role of the first chunk');
  expectEqual(deltas.join(''), flattened, 'the deltas joined');
  expect(deltas.length >= 2, `the node streamed in pieces, but ${deltas.length} content delta(s) arrived`);
  expectEqual(finish, 'stop', 'finish_reason of the last chunk');
  expectEqual(chunks, deltas.length + 2, 'chunks (role, contents, stop)');
});

await check('a node failure is an APIError with status 502', async () => {
  try {
    await client.chat.completions.create({ model: 'gemmanet/fail', messages });
  } catch (e) {
    expect(e instanceof OpenAI.APIError, `raised ${e?.constructor?.name}, not an APIError: ${e}`);
    expectEqual(e.status, 502, 'status');
    expectEqual(e.code, 'node_error', 'code');
    expectEqual(e.type, 'server_error', 'type');
    expect(String(e.message).includes('deliberate failure'), `message ${e.message} lacks the node's`);
    return;
  }
  throw new Error('no error was raised');
});

await check('a node failure in a stream is raised as an APIError', async () => {
  const stream = await client.chat.completions.create({ model: 'gemmanet/fail', messages, stream: true });
  try {
    for await (const _ of stream) {
      // the role chunk, then the error
    }
  } catch (e) {
    expect(e instanceof OpenAI.APIError, `raised ${e?.constructor?.name}, not an APIError: ${e}`);
    expectEqual(e.type, 'server_error', 'type');
    expect(String(e.message).includes('deliberate failure'), `message ${e.message} lacks the node's`);
    return;
  }
  throw new Error('the stream ended without an error');
});

await check('a bad key is an AuthenticationError', async () => {
  const bad = new OpenAI({ baseURL, apiKey: 'gn_00000000000000000000000000000000', timeout: 20_000 });
  try {
    await bad.chat.completions.create({ model: 'gemmanet/echo', messages });
  } catch (e) {
    expect(e instanceof OpenAI.AuthenticationError, `raised ${e?.constructor?.name}, not an AuthenticationError: ${e}`);
    expectEqual(e.status, 401, 'status');
    expectEqual(e.code, 'invalid_api_key', 'code');
    return;
  }
  throw new Error('no error was raised');
});

await check('models.list', async () => {
  const ids = [];
  for await (const m of client.models.list()) {
    expectEqual(m.object, 'model', `object of ${m.id}`);
    ids.push(m.id);
  }
  expectEqual(ids[0], 'gemmanet/auto', 'first model');
  for (const id of ['gemmanet/echo', 'gemmanet/fail', 'gemmanet/chat', 'house-model']) {
    expect(ids.includes(id), `${id} not in ${ids}`);
  }
});

await check('streaming completion with stream_options.include_usage', async () => {
  const stream = await client.chat.completions.create({
    model: 'gemmanet/echo', messages, stream: true, stream_options: { include_usage: true },
  });
  const deltas = [];
  let usage = null;
  let last = null;
  for await (const chunk of stream) {
    last = chunk;
    if (chunk.choices.length > 0) {
      expectEqual(chunk.usage, null, 'usage of a chunk with choices');
      if (chunk.choices[0].delta.content) deltas.push(chunk.choices[0].delta.content);
    } else {
      usage = chunk.usage;
    }
  }
  expectEqual(deltas.join(''), flattened, 'the deltas joined');
  expectEqual(last.choices, [], 'the last chunk has no choices');
  expectEqual(usage, { prompt_tokens: messages.length, completion_tokens: [...flattened].length,
    total_tokens: messages.length + [...flattened].length }, 'usage of the last chunk');
});

await check('completions (legacy), plain', async () => {
  const r = await client.completions.create({ model: 'gemmanet/echo', prompt: 'say this', max_tokens: 7 });
  expectEqual(r.object, 'text_completion', 'object');
  expect(r.id.startsWith('cmpl-'), `id ${r.id} does not start with cmpl-`);
  expectEqual(r.choices[0].text, 'say this', 'text (the node echoes the prompt)');
  expectEqual(r.choices[0].finish_reason, 'stop', 'finish_reason');
  // The node echoes 8 tokens, ignoring max_tokens: the client pays for the 7 it asked for at most.
  expectEqual(r.usage.completion_tokens, 7, 'usage.completion_tokens (no more than max_tokens)');
});

await check('completions (legacy), streaming with usage', async () => {
  const stream = await client.completions.create({
    model: 'gemmanet/echo', prompt: 'stream this please', stream: true, stream_options: { include_usage: true },
  });
  const texts = [];
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    expectEqual(chunk.object, 'text_completion', 'chunk object');
    if (chunk.choices.length === 0) {
      usage = chunk.usage;
      continue;
    }
    texts.push(chunk.choices[0].text);
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  expectEqual(texts.join(''), 'stream this please', 'the texts joined');
  expect(texts.length >= 3, `the node streamed in pieces, but ${texts.length} chunk(s) arrived`);
  expectEqual(finish, 'stop', 'finish_reason');
  expectEqual(usage?.completion_tokens, 18, 'usage.completion_tokens of the last chunk');
});

await check('embeddings (the client asks for base64 and decodes it)', async () => {
  const r = await client.embeddings.create({ model: 'gemmanet/embed', input: ['one', 'three'] });
  expectEqual(r.object, 'list', 'object');
  expectEqual(r.data.map((d) => d.index), [0, 1], 'indexes');
  expectEqual(r.data.map((d) => Array.from(d.embedding)), [[3, 0.5], [5, 0.5]], 'vectors');
  expectEqual(r.usage, { prompt_tokens: 8, total_tokens: 8 }, 'usage');
});

await check('embeddings as floats', async () => {
  const r = await client.embeddings.create({ model: 'gemmanet/embed', input: 'four', encoding_format: 'float' });
  expectEqual(r.data[0].embedding, [4, 0.5], 'vector');
});

await check('an alias falls back to its next task type when no node serves the first', async () => {
  const r = await client.chat.completions.create({ model: 'house-model', messages });
  expectEqual(r.model, 'house-model', 'model (as sent)');
  expectEqual(r.choices[0].message.content, flattened, 'content (echo served it)');
  const stream = await client.chat.completions.create({ model: 'house-model', messages, stream: true });
  const deltas = [];
  for await (const chunk of stream) {
    if (chunk.choices[0]?.delta?.content) deltas.push(chunk.choices[0].delta.content);
  }
  expectEqual(deltas.join(''), flattened, 'the streamed deltas (echo served it)');
  const c = await client.completions.create({ model: 'house-model', prompt: 'fall back' });
  expectEqual(c.choices[0].text, 'fall back', 'a completion through the alias');
});

// canonical is v with every object's keys sorted, for comparing JSON
// values whatever the order of their members.
function canonical(v) {
  if (Array.isArray(v)) return v.map(canonical);
  if (v && typeof v === 'object') {
    return Object.fromEntries(Object.keys(v).sort().map((k) => [k, canonical(v[k])]));
  }
  return v;
}

await check('tools, tool_choice, response_format, stop, seed and tool messages reach the node as sent', async () => {
  const schema = {
    type: 'object',
    properties: { city: { type: 'string', description: 'a <city> & its country' }, days: { type: 'array', items: { type: 'integer' } } },
    required: ['city', 'days'],
    additionalProperties: false,
  };
  const req = {
    model: 'gemmanet/params',
    messages: [
      { role: 'system', content: 'You are terse.' },
      { role: 'user', content: [{ type: 'text', text: 'weather in ' }, { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } }] },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'weather', arguments: '{"city":"Oslo"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temp":3}' },
    ],
    tools: [{ type: 'function', function: { name: 'weather', description: 'the weather', parameters: schema, strict: true } }],
    tool_choice: { type: 'function', function: { name: 'weather' } },
    parallel_tool_calls: false,
    response_format: { type: 'json_schema', json_schema: { name: 'answer', schema, strict: true } },
    stop: ['\n\n', 'END'],
    seed: 42,
    top_p: 0.5,
    user: 'user-1',
  };
  const r = await client.chat.completions.create(req);
  const { model, ...sent } = req;
  expectEqual(canonical(JSON.parse(r.choices[0].message.content)), canonical(sent), 'the params the node received');
});

if (failures > 0) {
  console.log(`${failures} check(s) failed`);
  process.exit(1);
}
console.log('all checks passed');
