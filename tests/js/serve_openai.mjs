// The official OpenAI client against pipeld's API (tests/test_serve_api.c, tests/test_serve_live.c):
// models list, completion, chat completion, streaming chat and completion, and N concurrent
// streams; prompt token counts from the independent references (@huggingface/tokenizers and
// @huggingface/jinja on the model's own files). Usage: node serve_openai.mjs - < input.json where
// input is {base_url, api_key, model, model_dir, prompt, messages, max_tokens, concurrent,
// seed}; prints what it saw as JSON (the C side asserts on it).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import OpenAI from "openai";
import { Tokenizer } from "@huggingface/tokenizers";
import { Template } from "@huggingface/jinja";

const input = JSON.parse(readFileSync(0, "utf8"));
const client = new OpenAI({
  baseURL: input.base_url,
  apiKey: input.api_key || "none",
  maxRetries: 0,
  timeout: 120000,
});

// The references: what the prompt is in tokens, computed without pipeld.
const dir = input.model_dir;
const tokJson = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"));
const tokConfig = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8"));
const tok = new Tokenizer(tokJson, tokConfig);
const textOf = (t) => (typeof t === "string" ? t : (t && t.content) || "");
const chatText = new Template(tokConfig.chat_template).render({
  messages: input.messages,
  add_generation_prompt: true,
  bos_token: textOf(tokConfig.bos_token),
  eos_token: textOf(tokConfig.eos_token),
});
const ref = {
  completion_prompt_tokens: tok.encode(input.prompt, { add_special_tokens: true }).ids.length,
  chat_prompt_tokens: tok.encode(chatText, { add_special_tokens: false }).ids.length,
};

const common = { model: input.model, max_tokens: input.max_tokens, seed: input.seed };
const out = { ref };

async function streamChat() {
  const stream = await client.chat.completions.create({
    ...common,
    messages: input.messages,
    stream: true,
    stream_options: { include_usage: true },
  });
  const seen = { text: "", chunks: 0, first_role: null, finish: null, usage: null, objects: [] };
  for await (const chunk of stream) {
    seen.chunks++;
    if (!seen.objects.includes(chunk.object)) seen.objects.push(chunk.object);
    if (chunk.usage) seen.usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    if (seen.chunks === 1) seen.first_role = c.delta.role ?? null;
    if (c.delta.content) seen.text += c.delta.content;
    if (c.finish_reason) seen.finish = c.finish_reason;
  }
  return seen;
}

if (input.concurrent) {
  // N streams at once; each one's text and finish reason
  const t0 = Date.now();
  const all = await Promise.allSettled(
    Array.from({ length: input.concurrent }, () => streamChat())
  );
  out.concurrent = all.map((r) =>
    r.status === "fulfilled" ? r.value : { error: String(r.reason && r.reason.message) }
  );
  out.concurrent_ms = Date.now() - t0;
} else {
  const models = await client.models.list();
  out.models = models.data.map((m) => ({ id: m.id, object: m.object, owned_by: m.owned_by }));

  const comp = await client.completions.create({ ...common, prompt: input.prompt });
  out.completion = {
    object: comp.object,
    id: comp.id,
    model: comp.model,
    text: comp.choices[0].text,
    finish: comp.choices[0].finish_reason,
    usage: comp.usage,
  };

  const chat = await client.chat.completions.create({ ...common, messages: input.messages });
  out.chat = {
    object: chat.object,
    id: chat.id,
    role: chat.choices[0].message.role,
    text: chat.choices[0].message.content,
    finish: chat.choices[0].finish_reason,
    usage: chat.usage,
  };

  out.stream_chat = await streamChat();

  const cs = await client.completions.create({ ...common, prompt: input.prompt, stream: true });
  out.stream_completion = { text: "", finish: null, objects: [] };
  for await (const chunk of cs) {
    if (!out.stream_completion.objects.includes(chunk.object))
      out.stream_completion.objects.push(chunk.object);
    out.stream_completion.text += chunk.choices[0].text;
    if (chunk.choices[0].finish_reason) out.stream_completion.finish = chunk.choices[0].finish_reason;
  }

  // errors come back as the client's typed errors
  try {
    await client.chat.completions.create({ ...common, model: "no-such-model", messages: input.messages });
    out.unknown_model = { status: 200 };
  } catch (e) {
    out.unknown_model = { status: e.status, code: e.code ?? null, type: e.type ?? null };
  }
}
process.stdout.write(JSON.stringify(out));
