// The live path (tests/test_serve_live.c): the official OpenAI client against a real local
// cluster's coordinator with a deployment. Checks, with greedy sampling so answers are exact:
// models list, completion, chat completion, streaming chat; the streamed text equals the whole
// one; usage.prompt_tokens equals what @huggingface/tokenizers and @huggingface/jinja give for
// the same prompt and messages; finish_reason agrees with completion_tokens; N concurrent
// streaming clients with prompts of different lengths each get what the same request gets
// alone, some joining while others decode and, with more clients than KV slots, some starting
// after an early finisher freed its slot; their texts and prompts are printed for the caller to
// compare with a batch job. Usage: node serve_check.mjs - < {base_url, api_key, model, model_dir,
// max_tokens, concurrent, kv_slots}; prints {ok, failures: [...], ...figures} and exits 1 when a
// check failed.
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
  timeout: 300000,
});
const failures = [];
const check = (cond, what) => {
  if (!cond) failures.push(what);
};

const dir = input.model_dir;
const tokConfig = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8"));
const tok = new Tokenizer(JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8")), tokConfig);
const textOf = (t) => (typeof t === "string" ? t : (t && t.content) || "");
const template = new Template(tokConfig.chat_template);
const chatTokens = (messages) =>
  tok.encode(
    template.render({
      messages,
      add_generation_prompt: true,
      bos_token: textOf(tokConfig.bos_token),
      eos_token: textOf(tokConfig.eos_token),
    }),
    { add_special_tokens: false }
  ).ids.length;
const textTokens = (text) => tok.encode(text, { add_special_tokens: true }).ids.length;

const max_tokens = input.max_tokens || 12;
const greedy = { model: input.model, max_tokens, temperature: 0, seed: 1 };

function checkUsage(what, usage, promptTokens, finish) {
  check(usage && usage.prompt_tokens === promptTokens,
    `${what}: prompt_tokens ${usage && usage.prompt_tokens}, the references say ${promptTokens}`);
  check(usage && usage.total_tokens === usage.prompt_tokens + usage.completion_tokens,
    `${what}: total_tokens`);
  check(finish === "stop" || finish === "length", `${what}: finish_reason ${finish}`);
  check(finish !== "length" || usage.completion_tokens === max_tokens,
    `${what}: finish length with ${usage && usage.completion_tokens} of ${max_tokens} tokens`);
  check(usage && usage.completion_tokens >= 1 && usage.completion_tokens <= max_tokens,
    `${what}: completion_tokens ${usage && usage.completion_tokens}`);
}

async function streamChat(messages) {
  const s = await client.chat.completions.create({
    ...greedy, messages, stream: true, stream_options: { include_usage: true },
  });
  const r = { text: "", role: null, finish: null, usage: null, chunks: 0, first: 0, last: 0 };
  for await (const chunk of s) {
    if (chunk.usage) r.usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    if (r.chunks++ === 0) r.role = c.delta.role ?? null;
    if (c.delta.content) {
      r.text += c.delta.content;
      r.last = performance.now();
      r.first = r.first || r.last;
    }
    if (c.finish_reason) r.finish = c.finish_reason;
  }
  return r;
}

async function wholeChat(messages) {
  const c = await client.chat.completions.create({ ...greedy, messages });
  return { text: c.choices[0].message.content, finish: c.choices[0].finish_reason, usage: c.usage };
}

const out = {};
const models = await client.models.list();
out.models = models.data.map((m) => m.id);
check(out.models.includes(input.model), `models: ${input.model} not in ${out.models}`);

const prompt = "The pipeline runs";
const comp = await client.completions.create({ ...greedy, prompt });
check(comp.object === "text_completion", `completion object ${comp.object}`);
checkUsage("completion", comp.usage, textTokens(prompt), comp.choices[0].finish_reason);
const compStream = await client.completions.create({ ...greedy, prompt, stream: true });
let compText = "";
for await (const chunk of compStream) compText += chunk.choices[0].text;
check(compText === comp.choices[0].text, "streamed completion text differs from the whole");

const messages = [
  { role: "system", content: "You are terse." },
  { role: "user", content: "Name a prime number." },
];
const chat = await wholeChat(messages);
checkUsage("chat", chat.usage, chatTokens(messages), chat.finish);
const streamed = await streamChat(messages);
check(streamed.role === "assistant", `first chunk role ${streamed.role}`);
check(streamed.text === chat.text,
  `streamed chat text ${JSON.stringify(streamed.text)} differs from ${JSON.stringify(chat.text)}`);
checkUsage("streamed chat", streamed.usage, chatTokens(messages), streamed.finish);
out.chat = chat;

// N concurrent clients, prompts of different lengths; each as it is alone
const n = input.concurrent || 0;
if (n) {
  const convs = Array.from({ length: n }, (_, i) => [
    { role: "user", content: `Count with me: ${"one two three ".repeat(1 + (i % 7) * 3)}go ${i}` },
  ]);
  const alone = [];
  for (let i = 0; i < n; i++) alone.push(await wholeChat(convs[i]));
  const t0 = Date.now();
  const all = await Promise.allSettled(convs.map((m) => streamChat(m)));
  out.concurrent_ms = Date.now() - t0;
  out.concurrent_ok = 0;
  all.forEach((r, i) => {
    if (r.status !== "fulfilled") {
      failures.push(`client ${i}: ${r.reason && r.reason.message}`);
      return;
    }
    out.concurrent_ok++;
    checkUsage(`client ${i}`, r.value.usage, chatTokens(convs[i]), r.value.finish);
    if (i < alone.length)
      check(r.value.text === alone[i].text,
        `client ${i}: under load ${JSON.stringify(r.value.text)}, alone ${JSON.stringify(alone[i].text)}`);
  });
  // continuous batching, seen from the clients: a request whose first token came while another
  // was decoding (it joined mid-flight), and one whose first token came after another had
  // ended (it waited for the slot an early finisher freed: more clients than KV slots)
  const ok = all.filter((r) => r.status === "fulfilled" && r.value.first).map((r) => r.value);
  out.joined_mid_flight = ok.filter((a) => ok.some((b) => b !== a && b.first < a.first && a.first < b.last)).length;
  const firstEnd = Math.min(...ok.map((r) => r.last));
  out.after_a_slot_freed = ok.filter((a) => a.first > firstEnd && ok.some((b) => b.first < a.first && a.first < b.last)).length;
  if (input.kv_slots && n > input.kv_slots)
    check(out.after_a_slot_freed >= 1, `no client of ${n} began after one ended, with ${input.kv_slots} KV slots`);
  check(out.joined_mid_flight >= 1, "no client began while another was decoding");
  out.texts = all.map((r) => (r.status === "fulfilled" ? r.value.text : null));
  out.prompts = convs;
}
out.ok = failures.length === 0;
out.failures = failures;
process.stdout.write(JSON.stringify(out));
process.exit(out.ok ? 0 : 1);
