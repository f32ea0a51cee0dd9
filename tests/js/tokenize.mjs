// Reference token ids for tests/test_tokenizer.c: @huggingface/tokenizers (an independent
// implementation) on a real tokenizer.json. Usage: node tokenize.mjs MODEL_DIR < cases.json
// where cases.json is an array of strings; prints an array of {ids, decoded} objects. A third
// argument "raw" encodes without special tokens added (apply_chat_template's encoding).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Tokenizer } from "@huggingface/tokenizers";

const dir = process.argv[2];
const json = JSON.parse(readFileSync(join(dir, "tokenizer.json"), "utf8"));
let config = {};
try {
  config = JSON.parse(readFileSync(join(dir, "tokenizer_config.json"), "utf8"));
} catch (e) {
  if (e.code !== "ENOENT") throw e;
}
const tok = new Tokenizer(json, config);
const cases = JSON.parse(readFileSync(0, "utf8"));
const out = cases.map((text) => {
  const ids = tok.encode(text, { add_special_tokens: process.argv[3] !== "raw" }).ids;
  const decoded = ids.length ? tok.decode(ids, { clean_up_tokenization_spaces: false }) : "";
  return { ids, decoded };
});
process.stdout.write(JSON.stringify(out));
