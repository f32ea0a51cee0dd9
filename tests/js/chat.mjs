// Reference renderings for tests/test_chat_template.c: @huggingface/jinja running the real chat
// template. Usage: node chat.mjs - < {template, bos_token, eos_token, cases: [{messages,
// add_generation_prompt}]}; prints an array of {text} or {error} (a raise_exception).
import { readFileSync } from "node:fs";
import { Template } from "@huggingface/jinja";

const input = JSON.parse(readFileSync(0, "utf8"));
const template = new Template(input.template);
const out = input.cases.map((c) => {
  try {
    const text = template.render({
      messages: c.messages,
      add_generation_prompt: c.add_generation_prompt,
      bos_token: input.bos_token,
      eos_token: input.eos_token,
    });
    return { text };
  } catch (e) {
    return { error: String(e.message) };
  }
});
process.stdout.write(JSON.stringify(out));
