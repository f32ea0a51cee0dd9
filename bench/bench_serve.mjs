// Load generator for the OpenAI API: N concurrent streaming chat clients with mixed prompt
// lengths, each sending requests back to back for a while; requests/s, output tok/s, time to
// first token and inter-token latency (p50, p99) at each N. Beside it, the same clients against
// a loopback SSE server in this process that answers the same events at no cost: the ceiling
// of the client, loopback and event framing on this machine.
//
//   node bench/bench_serve.mjs --url http://127.0.0.1:PORT/v1 --model NAME   (a live deployment)
//   node bench/bench_serve.mjs --front build/bin/bench_serve_front           (the front alone)
// Options: --clients 1,8,32  --seconds 10  --max-tokens 32  --api-key KEY  --no-reference
//          --completions (POST /v1/completions with the prompt as text: a model without a chat
//          template)
//          --front-args "--step-us 5000 --prefill-us 20" (the stub loop's step and prefill)
// Needs tests/js's openai package (tools/setup.sh installs it).
import { createServer } from "node:http";
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, "../tests/js/package.json"));
const OpenAI = require("openai").default ?? require("openai");

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => {
    if (a.startsWith("--")) acc.push([a.slice(2), all[i + 1] && !all[i + 1].startsWith("--") ? all[i + 1] : true]);
    return acc;
  }, [])
);
const clientsList = String(args.clients || "1,8,32").split(",").map(Number);
const seconds = Number(args.seconds || 10);
const maxTokens = Number(args["max-tokens"] || 32);
const completions = Boolean(args.completions);

// mixed prompt lengths: 1 to ~400 words
const prompts = Array.from({ length: 16 }, (_, i) =>
  `Request ${i}: ` + "tell me about pipelines and stages ".repeat(1 + ((i * 37) % 64))
);

function pct(xs, p) {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
}

async function run(baseURL, model, n) {
  const client = new OpenAI({ baseURL, apiKey: args["api-key"] || "none", maxRetries: 0, timeout: 600000 });
  // one request first, outside the figures: the front loads a model's tokenizer on its first
  if (completions) await client.completions.create({ model, max_tokens: 1, prompt: "hi" });
  else await client.chat.completions.create({ model, max_tokens: 1, messages: [{ role: "user", content: "hi" }] });
  const ttft = [], itl = [];
  let requests = 0, tokens = 0, errors = 0, k = 0;
  const t0 = performance.now(), until = t0 + seconds * 1000;
  async function worker(w) {
    while (performance.now() < until) {
      const prompt = prompts[(w * 7 + k++) % prompts.length];
      const start = performance.now();
      let last = 0;
      try {
        const req = { model, max_tokens: maxTokens, temperature: 0, seed: 1, stream: true,
          stream_options: { include_usage: true } };
        const stream = completions
          ? await client.completions.create({ ...req, prompt })
          : await client.chat.completions.create({ ...req, messages: [{ role: "user", content: prompt }] });
        for await (const chunk of stream) {
          if (chunk.usage) tokens += chunk.usage.completion_tokens;
          const c = chunk.choices[0];
          if (!c || !(completions ? c.text : c.delta.content)) continue;
          const now = performance.now();
          if (!last) ttft.push(now - start);
          else itl.push(now - last);
          last = now;
        }
        requests++;
      } catch (e) {
        errors++;
        if (errors < 3) console.error(`  client ${w}: ${e.message}`);
      }
    }
  }
  await Promise.all(Array.from({ length: n }, (_, w) => worker(w)));
  const s = (performance.now() - t0) / 1000;
  return { n, requests, errors, rps: requests / s, tps: tokens / s,
    ttft50: pct(ttft, 50), ttft99: pct(ttft, 99), itl50: pct(itl, 50), itl99: pct(itl, 99) };
}

// The reference: an SSE server answering each request with maxTokens content events (and the
// role, finish, usage and [DONE] events) at once, shaped as the real ones.
function referenceServer() {
  return new Promise((resolve) => {
    const srv = createServer((req, res) => {
      req.resume();
      req.on("end", () => {
        res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
        const base = { id: "chatcmpl-ref", object: "chat.completion.chunk", created: 1, model: "ref" };
        const ev = (o) => res.write(`data: ${JSON.stringify({ ...base, ...o })}\n\n`);
        if (completions) { /* text_completion chunks */
          for (let i = 0; i < maxTokens; i++)
            res.write(`data: ${JSON.stringify({ ...base, object: "text_completion", choices: [{ index: 0, text: " word", finish_reason: null }] })}\n\n`);
          res.write(`data: ${JSON.stringify({ ...base, object: "text_completion", choices: [], usage: { prompt_tokens: 10, completion_tokens: maxTokens, total_tokens: 10 + maxTokens } })}\n\n`);
          res.end("data: [DONE]\n\n");
          return;
        }
        ev({ choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }], usage: null });
        for (let i = 0; i < maxTokens; i++)
          ev({ choices: [{ index: 0, delta: { content: " word" }, finish_reason: null }], usage: null });
        ev({ choices: [{ index: 0, delta: {}, finish_reason: "length" }], usage: null });
        ev({ choices: [], usage: { prompt_tokens: 10, completion_tokens: maxTokens, total_tokens: 10 + maxTokens } });
        res.end("data: [DONE]\n\n");
      });
    });
    srv.listen(0, "127.0.0.1", () => resolve(srv));
  });
}

async function startFront(bin) {
  const extra = args["front-args"] ? String(args["front-args"]).split(" ") : [];
  const child = spawn(bin, extra, { stdio: ["pipe", "pipe", "inherit"] });
  const url = await new Promise((resolve, reject) => {
    let buf = "";
    child.stdout.on("data", (d) => {
      buf += d;
      const m = buf.match(/url (\S+)\n/);
      if (m) resolve(m[1]);
    });
    child.on("exit", (c) => reject(new Error(`bench_serve_front exited ${c}`)));
  });
  return { url, stop: () => child.stdin.end() };
}

let front = null, url = args.url, model = args.model;
if (args.front) {
  front = await startFront(args.front);
  url = front.url;
  model = "bench";
}
if (!url || !model) {
  console.error("usage: bench_serve.mjs --url URL --model NAME | --front PATH [--clients 1,8,32]");
  process.exit(2);
}
const ref = args["no-reference"] ? null : await referenceServer();
const refUrl = ref && `http://127.0.0.1:${ref.address().port}/v1`;

console.log(`# ${args.front ? `the front alone (stub loop ${args["front-args"] || "default"})` : url}, model ${model}: streaming ${completions ? "completions" : "chat"}, ` +
  `max_tokens ${maxTokens}, greedy, ${prompts.length} prompt lengths, ${seconds} s per row`);
console.log("| clients | requests | errors | req/s | output tok/s | TTFT p50 / p99 ms | ITL p50 / p99 ms | reference req/s, tok/s | tok/s / reference |");
console.log("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
for (const n of clientsList) {
  const r = await run(url, model, n);
  const f = (x, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : "-");
  let refCol = "-", ratio = "-";
  if (ref) {
    const q = await run(refUrl, "ref", n);
    refCol = `${f(q.rps)}, ${f(q.tps, 0)}`;
    ratio = f(r.tps / q.tps, 3);
  }
  console.log(`| ${n} | ${r.requests} | ${r.errors} | ${f(r.rps)} | ${f(r.tps, 0)} | ${f(r.ttft50)} / ${f(r.ttft99)} | ${f(r.itl50, 2)} / ${f(r.itl99, 2)} | ${refCol} | ${ratio} |`);
}
ref && ref.close();
front && front.stop();
